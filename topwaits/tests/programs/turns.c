/* Four workers (tw_turns) take one mutex in turn, and each sleeps 2 ms inside
 * it (in tw_nap, a small helper called by tw_work_locked, the function that
 * holds the lock) before a little work outside it. Whoever holds the lock, the
 * others wait behind the same sleep: one cause, not four. Prints "ready". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long done;

__attribute__((noinline)) void tw_nap(void) {
    struct timespec d = {0, 2000000};
    nanosleep(&d, NULL);
}

__attribute__((noinline)) void tw_work_locked(void) {
    pthread_mutex_lock(&lock);
    tw_nap();
    done++;
    pthread_mutex_unlock(&lock);
}

static void *worker(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "tw_turns");
    for (;;) {
        tw_work_locked();
        for (volatile int i = 0; i < 20000; i++)
            ;
    }
    return NULL;
}

int main(void) {
    pthread_t t;
    for (int i = 0; i < 4; i++)
        pthread_create(&t, NULL, worker, NULL);
    usleep(50000);
    printf("ready\n");
    fflush(stdout);
    pause();
    return 0;
}
