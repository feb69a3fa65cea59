/* The wait that limits a process, hidden under longer idle ones: four workers
 * (tw_worker) take one mutex in turn; its other user, tw_holder, sleeps 2 ms while
 * it holds it. Eight pool threads (tw_pool) wait on a condition variable that is
 * never signalled, far longer than anyone else. Prints "ready" once all run. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t no_work = PTHREAD_COND_INITIALIZER;
static volatile unsigned long done;

/* About 20 us of work on the CPU. */
static void compute(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 20000);
}

__attribute__((noinline)) void tw_sleep_holding_the_lock(void) {
    struct timespec d = {0, 2000000};
    nanosleep(&d, NULL);
}

static void *holder(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "tw_holder");
    for (;;) {
        pthread_mutex_lock(&lock);
        tw_sleep_holding_the_lock();
        pthread_mutex_unlock(&lock);
        compute();
    }
    return NULL;
}

__attribute__((noinline)) void tw_take_the_lock(void) {
    pthread_mutex_lock(&lock);
    done++;
    pthread_mutex_unlock(&lock);
}

static void *worker(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "tw_worker");
    for (;;) {
        tw_take_the_lock();
        compute();
    }
    return NULL;
}

__attribute__((noinline)) void tw_wait_for_work(void) {
    pthread_mutex_lock(&pool_lock);
    for (;;)
        pthread_cond_wait(&no_work, &pool_lock);
}

static void *pool(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "tw_pool");
    tw_wait_for_work();
    return NULL;
}

int main(void) {
    pthread_t t;
    for (int i = 0; i < 8; i++)
        pthread_create(&t, NULL, pool, NULL);
    pthread_create(&t, NULL, holder, NULL);
    for (int i = 0; i < 4; i++)
        pthread_create(&t, NULL, worker, NULL);
    usleep(100000);
    printf("ready\n");
    fflush(stdout);
    pause();
    return 0;
}
