/* Locks a program builds itself, each on another primitive: a semaphore
 * (sem_wait/sem_post), a condition variable (a flag under a mutex, waited for
 * with pthread_cond_wait) and a pipe (one token, read to take it, written to
 * give it back). Two threads take turns on each, and sleep 2 ms while they hold
 * it, each lock in functions named for it. Prints "ready" once all run. */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static sem_t sem;
static pthread_mutex_t cv_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int cv_held;
static int token[2];

__attribute__((noinline)) void tw_nap_holding(void) {
    struct timespec d = {0, 2000000};
    nanosleep(&d, NULL);
}

/* Between turns: long enough for the other thread to take the lock. */
static void pause_between(void) {
    struct timespec d = {0, 200000};
    nanosleep(&d, NULL);
}

/* Kept in the stacks: no tail call to the primitive. */
#define FRAME() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) void tw_sem_take(void) {
    sem_wait(&sem);
    FRAME();
}

__attribute__((noinline)) void tw_sem_give(void) {
    sem_post(&sem);
    FRAME();
}

__attribute__((noinline)) void tw_cv_take(void) {
    pthread_mutex_lock(&cv_mutex);
    while (cv_held)
        pthread_cond_wait(&cv, &cv_mutex);
    cv_held = 1;
    pthread_mutex_unlock(&cv_mutex);
}

__attribute__((noinline)) void tw_cv_give(void) {
    pthread_mutex_lock(&cv_mutex);
    cv_held = 0;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&cv_mutex);
}

__attribute__((noinline)) void tw_pipe_take(void) {
    char c;
    if (read(token[0], &c, 1) != 1)
        _exit(1);
}

__attribute__((noinline)) void tw_pipe_give(void) {
    if (write(token[1], "t", 1) != 1)
        _exit(1);
}

struct kind {
    const char *name;
    void (*take)(void);
    void (*give)(void);
};

static const struct kind kinds[] = {
    {"tw_sem", tw_sem_take, tw_sem_give},
    {"tw_cv", tw_cv_take, tw_cv_give},
    {"tw_pipe", tw_pipe_take, tw_pipe_give},
};

static void *taker(void *arg) {
    const struct kind *k = arg;
    pthread_setname_np(pthread_self(), k->name);
    for (;;) {
        k->take();
        tw_nap_holding();
        k->give();
        pause_between();
    }
    return NULL;
}

int main(void) {
    if (sem_init(&sem, 0, 1) || pipe(token) || write(token[1], "t", 1) != 1)
        return 1;
    pthread_t t;
    for (unsigned i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        for (int j = 0; j < 2; j++)
            pthread_create(&t, NULL, taker, (void *)&kinds[i]);
    usleep(100000);
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
