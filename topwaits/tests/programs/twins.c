/* Two call paths into one blocking read, alternating, built without frame
 * pointers: path_a and path_b have the same frame size, so the thread enters
 * the kernel with the same registers on both, and only the return address in
 * path_a's or path_b's slot tells them apart. A user stack walk reused for the
 * wrong path would give all the wait to one of them. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static int fds[2];
volatile unsigned long count_a, count_b;

__attribute__((noinline)) static void wait_here(void) {
    char c;
    if (read(fds[0], &c, 1) != 1)
        _exit(1);
}

__attribute__((noinline)) void path_a(void) {
    wait_here();
    count_a++;
}

__attribute__((noinline)) void path_b(void) {
    wait_here();
    count_b++;
}

static void *writer(void *arg) {
    (void)arg;
    for (;;) {
        usleep(2000);
        if (write(fds[1], "x", 1) != 1)
            _exit(1);
    }
    return NULL;
}

int main(void) {
    pthread_t t;
    if (pipe(fds) != 0 || pthread_create(&t, NULL, writer, NULL) != 0)
        return 1;
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        path_a();
        path_b();
    }
}
