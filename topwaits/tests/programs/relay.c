/* A request relayed through two threads: the client (tw_client) writes to the
 * server (tw_server), which computes for 3 ms and hands it to a worker
 * (tw_sleeper), which sleeps 2 ms and answers the client. All through pipes, so
 * each wakeup names its waker. Prints "ready client=TID" once the relay runs. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int to_server[2], to_sleeper[2], to_client[2];
static volatile long client_tid;

/* Where the server computes: on-CPU samples of `why` name it. */
__attribute__((noinline)) void tw_compute(long ms) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ms * 1000000L);
}

static void get(int fd) {
    char c;
    if (read(fd, &c, 1) != 1)
        _exit(1);
}

static void put(int fd) {
    if (write(fd, "x", 1) != 1)
        _exit(1);
}

__attribute__((noinline)) void tw_serve(void) {
    get(to_server[0]);
    tw_compute(3);
    put(to_sleeper[1]);
}

static void *server(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "tw_server");
    for (;;)
        tw_serve();
    return NULL;
}

__attribute__((noinline)) void tw_sleep_then_answer(void) {
    struct timespec d = {0, 2000000};
    get(to_sleeper[0]);
    nanosleep(&d, NULL);
    put(to_client[1]);
}

static void *sleeper(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "tw_sleeper");
    for (;;)
        tw_sleep_then_answer();
    return NULL;
}

__attribute__((noinline)) void tw_ask(void) {
    put(to_server[1]);
    get(to_client[0]);
}

static void *client(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "tw_client");
    client_tid = syscall(SYS_gettid);
    for (;;)
        tw_ask();
    return NULL;
}

int main(void) {
    pthread_t t;
    if (pipe(to_server) || pipe(to_sleeper) || pipe(to_client))
        return 1;
    pthread_create(&t, NULL, server, NULL);
    pthread_create(&t, NULL, sleeper, NULL);
    pthread_create(&t, NULL, client, NULL);
    while (!client_tid)
        usleep(1000);
    usleep(50000);
    printf("ready client=%ld\n", client_tid);
    fflush(stdout);
    pause();
    return 0;
}
