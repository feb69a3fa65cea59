/* A thread (tw_restless) that sleeps 50 us at a time three calls deep
 * (tw_nap3 <- tw_nap2 <- tw_nap1) and, between its sleeps, runs for 50 us in
 * tw_scribble, whose calls write their own words over those its sleep's frames
 * held. Its stack read from /proc while it wakes and runs mixes the two
 * moments. A thread per CPU spins beside it (tw_spin), so that a reader is
 * often preempted in the middle of a read, as on a busy machine. Built without
 * frame pointers, so that its stack is unwound by the tables alone. Prints
 * "ready" once it runs. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

volatile long sink;

__attribute__((noinline)) long tw_scribble(int depth) {
    volatile long pad[4];
    pad[0] = depth;
    if (depth > 0)
        pad[1] = tw_scribble(depth - 1);
    return pad[0] + pad[1];
}

__attribute__((noinline)) void tw_nap3(void) {
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
    sink++;
}

__attribute__((noinline)) void tw_nap2(void) {
    tw_nap3();
    sink++;
}

__attribute__((noinline)) void tw_nap1(void) {
    tw_nap2();
    sink++;
}

static long ns_since(const struct timespec *t) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - t->tv_sec) * 1000000000L + (now.tv_nsec - t->tv_nsec);
}

static void *tw_restless_entry(void *arg) {
    (void)arg;
    for (;;) {
        tw_nap1();
        struct timespec start;
        clock_gettime(CLOCK_MONOTONIC, &start);
        while (ns_since(&start) < 50000)
            sink += tw_scribble(12);
    }
    return NULL;
}

static void *tw_spin_entry(void *arg) {
    (void)arg;
    for (;;)
        sink++;
    return NULL;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, tw_restless_entry, NULL) != 0)
        return 1;
    pthread_setname_np(t, "tw_restless");
    for (long cpu = sysconf(_SC_NPROCESSORS_ONLN); cpu > 0; cpu--) {
        pthread_t spin;
        if (pthread_create(&spin, NULL, tw_spin_entry, NULL) != 0)
            return 1;
        pthread_setname_np(spin, "tw_spin");
    }
    printf("ready\n");
    fflush(stdout);
    pause();
    return 0;
}
