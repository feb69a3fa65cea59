/* A workload built without frame pointers (-O2 -fomit-frame-pointer), for the
 * tests of a trace's first moments. Three threads wait in read() on a pipe,
 * three functions deep, until a line on stdin releases them (waits that are in
 * progress when the trace begins); each then naps 700 ms in nanosleep, four
 * functions deep (long waits that begin with the trace), and waits on the pipe
 * again. Prints "ready" once every thread waits. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define THREADS 3
static int fds[2];
volatile long sink;

#include "levels.h"

__attribute__((noinline)) void tw_go_leaf(long n) {
    char c;
    (void)n;
    if (read(fds[0], &c, 1) != 1)
        _exit(0);
}
LEVEL(tw_go_2, tw_go_leaf)
LEVEL(tw_go_1, tw_go_2)

__attribute__((noinline)) void tw_nap_leaf(long n) {
    struct timespec ts = {0, 700 * 1000 * 1000};
    (void)n;
    nanosleep(&ts, NULL);
}
LEVEL(tw_nap_3, tw_nap_leaf)
LEVEL(tw_nap_2, tw_nap_3)
LEVEL(tw_nap_1, tw_nap_2)

static volatile int waiting;

static void *worker(void *arg) {
    (void)arg;
    __sync_fetch_and_add(&waiting, 1);
    for (;;) {
        tw_go_1(0);
        tw_nap_1(0);
    }
    return NULL;
}

int main(void) {
    pthread_t t[THREADS];
    if (pipe(fds))
        return 1;
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, NULL))
            return 1;
    while (waiting < THREADS)
        usleep(1000);
    usleep(50 * 1000);
    printf("ready pid=%d\n", getpid());
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        char go[THREADS];
        memset(go, 'g', sizeof go);
        if (write(fds[1], go, sizeof go) != sizeof go)
            return 1;
    }
    return 0;
}
