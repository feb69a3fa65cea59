/* A holder that computes in two phases: 3 ms in tw_spin_holding with a mutex
 * held, while a waiter waits for it, then 3 ms in tw_spin_alone with it free,
 * while nobody waits for it. The waiter takes the mutex in a loop, hands each
 * take to a consumer (so that its waiting held someone up), and sleeps 0.2 ms
 * between takes. Prints "ready" once all run. */
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static sem_t taken;
static volatile unsigned long sink;

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* Computes for `ns` without a system call in its loop. */
static inline void spin(long ns) {
    long end = now_ns() + ns;
    while (now_ns() < end)
        for (int i = 0; i < 1000; i++)
            sink += i;
}

__attribute__((noinline)) void tw_spin_holding(void) { spin(3000000); __asm__ volatile("" ::: "memory"); }
__attribute__((noinline)) void tw_spin_alone(void) { spin(3000000); __asm__ volatile("" ::: "memory"); }

static void *holder(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "tw_holder");
    for (;;) {
        pthread_mutex_lock(&lock);
        tw_spin_holding();
        pthread_mutex_unlock(&lock);
        tw_spin_alone();
    }
    return NULL;
}

__attribute__((noinline)) void tw_take(void) {
    pthread_mutex_lock(&lock);
    sink++;
    pthread_mutex_unlock(&lock);
}

static void *waiter(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "tw_waiter");
    struct timespec d = {0, 200000};
    for (;;) {
        tw_take();
        sem_post(&taken);
        nanosleep(&d, NULL);
    }
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "tw_consumer");
    for (;;)
        sem_wait(&taken);
    return NULL;
}

int main(void) {
    pthread_t t;
    if (sem_init(&taken, 0, 0))
        return 1;
    pthread_create(&t, NULL, consumer, NULL);
    pthread_create(&t, NULL, holder, NULL);
    pthread_create(&t, NULL, waiter, NULL);
    usleep(50000);
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
