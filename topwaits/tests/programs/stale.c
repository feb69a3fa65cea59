/* A thread (tw_stale) blocked several calls deep since before any trace, built
 * without frame pointers (-O2 -fomit-frame-pointer), whose stack holds return
 * addresses left behind by calls that have returned (tw_leaves_garbage's, in
 * the uninitialised buffer of tw_level1), and a value in bp that is no frame
 * pointer. A walk by the unwind tables reaches the thread's entry and names
 * tw_level3 <- tw_level2 <- tw_level1 <- tw_stale_entry; a scan of the stack
 * would take the stale addresses for frames. A second thread (tw_fp) blocks
 * under a function built with a frame pointer, reached from code that leaves
 * bp alone: its stack needs the frame pointer the thread entered the kernel
 * with, which /proc does not show. Prints "ready" once both are blocked. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int fds[2];
volatile long sink;

__attribute__((noinline)) long tw_leaves_garbage(int depth) {
    volatile long pad[6];
    pad[0] = depth;
    if (depth > 0)
        pad[1] = tw_leaves_garbage(depth - 1) + 1;
    return pad[0] + pad[1];
}

__attribute__((noinline)) void tw_level3(void) {
    char b;
    /* bp holds no frame pointer here: a plain number. */
    __asm__ volatile("mov $0x5eed, %%rbp" ::: "rbp");
    sink = read(fds[0], &b, 1);
}

__attribute__((noinline)) void tw_level2(void) {
    tw_level3();
    sink++;
}

__attribute__((noinline)) void tw_level1(void) {
    volatile char buf[2048]; /* left as it was: stale return addresses */
    sink = buf[7];
    tw_level2();
    sink += buf[9];
}

static void *tw_stale_entry(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "tw_stale");
    sink = tw_leaves_garbage(40);
    tw_level1();
    return NULL;
}

__attribute__((noinline)) void tw_fp_level3(void) {
    char b;
    sink = read(fds[0], &b, 1);
}

__attribute__((noinline, optimize("no-omit-frame-pointer"))) void tw_fp_level2(void) {
    volatile char pad[64];
    pad[3] = 1;
    tw_fp_level3();
    sink += pad[3];
}

static void *tw_fp_entry(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "tw_fp");
    tw_fp_level2();
    return NULL;
}

int main(void) {
    pthread_t t;
    if (pipe(fds))
        return 1;
    pthread_create(&t, NULL, tw_stale_entry, NULL);
    pthread_create(&t, NULL, tw_fp_entry, NULL);
    usleep(200000);
    printf("ready\n");
    fflush(stdout);
    pause();
    return 0;
}
