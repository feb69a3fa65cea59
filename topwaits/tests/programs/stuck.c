/* Workloads for the "stuck" kernel tests: each mode blocks threads in a known way
 * and prints one line "ready KEY=VALUE ..." with the ids, addresses and times the
 * tests check against, then stays blocked until killed.
 *
 *   mutex      a holder takes a mutex and sleeps 30 s; a waiter blocks on the mutex
 *   abba       two threads deadlock on two mutexes taken in opposite orders
 *   pipe       the main thread reads an empty pipe whose writer is a child process
 *   latesleep  a thread waits DELAY_MS, then sleeps 2 s (started by the test)
 *   many N     N threads block on one mutex held by a sleeping main thread
 *   junk FILE  (x86-64) a thread sleeps with its frame pointer aimed into a data
 *              file mapping, so frame-pointer walks yield a data address, while
 *              another thread sleeps in named functions
 */
#include <fcntl.h>
#include <sys/mman.h>
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both;
static volatile int holder_tid, waiter_tid, t1_tid, t2_tid;
static volatile long long holder_sleep_at, sleep_at;
static int delay_ms;

static int tid(void) { return (int)syscall(SYS_gettid); }

static long long wall_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

__attribute__((noinline)) static void holder_sleeps(void) {
    holder_sleep_at = wall_ns();
    sleep(30);
    __asm__ volatile("" ::: "memory");
}

static void *holder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&held);
    holder_tid = tid();
    pthread_barrier_wait(&both);
    holder_sleeps();
    pthread_mutex_unlock(&held);
    return NULL;
}

__attribute__((noinline)) static void waiter_blocks(void) {
    pthread_mutex_lock(&held);
    pthread_mutex_unlock(&held);
    __asm__ volatile("" ::: "memory");
}

static void *waiter(void *arg) {
    (void)arg;
    waiter_tid = tid();
    pthread_barrier_wait(&both);
    waiter_blocks();
    return NULL;
}

__attribute__((noinline)) static void take_second(pthread_mutex_t *m) {
    pthread_mutex_lock(m);
    __asm__ volatile("" ::: "memory");
}

static void *abba_one(void *arg) {
    (void)arg;
    t1_tid = tid();
    pthread_mutex_lock(&lock_a);
    pthread_barrier_wait(&both);
    take_second(&lock_b);
    return NULL;
}

static void *abba_two(void *arg) {
    (void)arg;
    t2_tid = tid();
    pthread_mutex_lock(&lock_b);
    pthread_barrier_wait(&both);
    take_second(&lock_a);
    return NULL;
}

__attribute__((noinline)) static void late_sleeper_sleeps(void) {
    sleep_at = wall_ns();
    nap_ms(2000);
    __asm__ volatile("" ::: "memory");
}

static void *late_sleeper(void *arg) {
    (void)arg;
    nap_ms(delay_ms);
    late_sleeper_sleeps();
    return NULL;
}

__attribute__((noinline)) static void reader_reads(int fd) {
    char c;
    if (read(fd, &c, 1) < 0)
        perror("read");
    __asm__ volatile("" ::: "memory");
}

static void *many_waiter(void *arg) {
    (void)arg;
    waiter_blocks();
    return NULL;
}

#if defined(__x86_64__)
static struct timespec junk_nap = {0, 200000000};

/* Sleeps through a raw syscall with rbp pointing at a fake frame record in a data
 * mapping, as code built without frame pointers can leave it. */
__attribute__((noinline)) static void junk_frame_sleep(char *record) {
    long ret;
    __asm__ volatile("push %%rbp\n\t"
                     "mov %[rec], %%rbp\n\t"
                     "syscall\n\t"
                     "pop %%rbp\n\t"
                     : "=a"(ret)
                     : "a"(35L), "D"(&junk_nap), "S"(0L), [rec] "r"(record)
                     : "rcx", "r11", "memory");
}

static void *junk_thread(void *record) {
    for (;;)
        junk_frame_sleep(record);
    return NULL;
}
#endif

__attribute__((noinline)) static void clean_sleep_inner(void) {
    nap_ms(100);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void clean_sleeper_loop(void) {
    for (;;)
        clean_sleep_inner();
}

static void *clean_thread(void *arg) {
    (void)arg;
    clean_sleeper_loop();
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    pthread_t a, b;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(mode, "mutex")) {
        pthread_barrier_init(&both, NULL, 3);
        pthread_create(&a, NULL, holder, NULL);
        pthread_create(&b, NULL, waiter, NULL);
        pthread_barrier_wait(&both);
        while (!holder_sleep_at)
            nap_ms(1);
        nap_ms(50); /* let the waiter reach the lock */
        printf("ready holder=%d waiter=%d mutex=%p holder_sleep_at=%lld\n", holder_tid, waiter_tid, (void *)&held, holder_sleep_at);
        pthread_join(b, NULL);
    } else if (!strcmp(mode, "abba")) {
        pthread_barrier_init(&both, NULL, 3);
        pthread_create(&a, NULL, abba_one, NULL);
        pthread_create(&b, NULL, abba_two, NULL);
        pthread_barrier_wait(&both);
        nap_ms(100);
        printf("ready t1=%d t2=%d a=%p b=%p\n", t1_tid, t2_tid, (void *)&lock_a, (void *)&lock_b);
        pthread_join(a, NULL);
    } else if (!strcmp(mode, "pipe")) {
        int fds[2];
        if (pipe(fds))
            return 1;
        pid_t child = fork();
        if (child == 0) {
            close(fds[0]);
            pause(); /* holds the write end, writes nothing */
            _exit(0);
        }
        close(fds[1]);
        printf("ready reader=%d writer=%d\n", tid(), (int)child);
        reader_reads(fds[0]);
    } else if (!strcmp(mode, "latesleep")) {
        delay_ms = argc > 2 ? atoi(argv[2]) : 500;
        printf("ready pid=%d\n", (int)getpid());
        /* Wait for the test's go (a line on stdin), then start the clock. */
        char line[16];
        if (!fgets(line, sizeof line, stdin))
            return 1;
        pthread_create(&a, NULL, late_sleeper, NULL);
        pthread_join(a, NULL);
        printf("slept_at=%lld\n", sleep_at);
    } else if (!strcmp(mode, "many")) {
        int n = argc > 2 ? atoi(argv[2]) : 1000;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        pthread_mutex_lock(&held);
        for (int i = 0; i < n; i++) {
            pthread_t t;
            if (pthread_create(&t, &attr, many_waiter, NULL)) {
                perror("pthread_create");
                return 1;
            }
        }
        nap_ms(300);
        printf("ready main=%d\n", tid());
        holder_sleeps();
    } else if (!strcmp(mode, "junk") && argc > 2) {
#if defined(__x86_64__)
        int fd = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || ftruncate(fd, 4096))
            return 1;
        char *data = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (data == MAP_FAILED)
            return 1;
        /* The fake record at +0x100: saved frame pointer 0 (the end), "return
         * address" +0x200, inside this data mapping. */
        unsigned long *rec = (unsigned long *)(data + 0x100);
        rec[0] = 0;
        rec[1] = (unsigned long)(data + 0x200);
        pthread_create(&a, NULL, junk_thread, data + 0x100);
        pthread_create(&b, NULL, clean_thread, NULL);
        printf("ready junk=%p\n", (void *)(data + 0x200));
        pthread_join(a, NULL);
#else
        fprintf(stderr, "junk: x86-64 only\n");
        return 2;
#endif
    } else {
        fprintf(stderr, "usage: stuck mutex|abba|pipe|latesleep [MS]|many [N]|junk FILE\n");
        return 2;
    }
    return 0;
}
