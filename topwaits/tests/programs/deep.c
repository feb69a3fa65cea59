/* A workload built without frame pointers (-O2 -fomit-frame-pointer), for the
 * unwinding tests: the main thread and one pthread each block six named
 * functions deep, through libc: the main thread in nanosleep, the other in read
 * on a pipe that main writes to. Prints "ready" and runs for argv[1] seconds. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int fds[2];
volatile long sink;

#include "levels.h"

__attribute__((noinline)) void tw_sleep_leaf(long n) {
    struct timespec ts = {0, 2 * 1000 * 1000};
    (void)n;
    nanosleep(&ts, NULL);
}
LEVEL(tw_sleep_5, tw_sleep_leaf)
LEVEL(tw_sleep_4, tw_sleep_5)
LEVEL(tw_sleep_3, tw_sleep_4)
LEVEL(tw_sleep_2, tw_sleep_3)
LEVEL(tw_sleep_1, tw_sleep_2)

__attribute__((noinline)) void tw_read_leaf(long n) {
    char c;
    (void)n;
    if (read(fds[0], &c, 1) != 1)
        exit(0);
}
LEVEL(tw_read_5, tw_read_leaf)
LEVEL(tw_read_4, tw_read_5)
LEVEL(tw_read_3, tw_read_4)
LEVEL(tw_read_2, tw_read_3)
LEVEL(tw_read_1, tw_read_2)

static void *reader(void *arg) {
    (void)arg;
    for (;;)
        tw_read_1(0);
    return NULL;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 3;
    pthread_t t;
    if (pipe(fds) || pthread_create(&t, NULL, reader, NULL))
        return 1;
    printf("ready pid=%d\n", getpid());
    fflush(stdout);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        tw_sleep_1(0);
        if (write(fds[1], "x", 1) != 1)
            return 1;
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec - start.tv_sec + (now.tv_nsec - start.tv_nsec) / 1e9 < secs);
    return 0;
}
