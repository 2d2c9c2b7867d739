// Test fixture for the CPU sampler: built with
// gcc -O1 -fno-omit-frame-pointer -pthread hot.c.
//
// Usage: hot [2]. Prints "<main tid> <worker tid>\n" (worker 0 without "2"),
// then burns CPU forever: the main thread in hot_loop (and briefly in
// cold_loop), the worker thread (with "2") in other_loop.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

static volatile unsigned long sink;

__attribute__((noinline)) void hot_loop(void)
{
	for (unsigned long i = 0; i < 20000000UL; i++)
		sink += i * 7;
}

__attribute__((noinline)) void cold_loop(void)
{
	for (unsigned long i = 0; i < 200000UL; i++)
		sink += i * 3;
}

__attribute__((noinline)) void other_loop(void)
{
	for (unsigned long i = 0; i < 20000000UL; i++)
		sink += i * 5;
}

static void *worker(void *arg)
{
	int *tid = arg;
	*tid = (int)syscall(SYS_gettid);
	for (;;)
		other_loop();
	return NULL;
}

int main(int argc, char **argv)
{
	int wtid = 0;
	if (argc > 1 && argv[1][0] == '2') {
		pthread_t th;
		if (pthread_create(&th, NULL, worker, &wtid) != 0)
			return 1;
		while (__atomic_load_n(&wtid, __ATOMIC_SEQ_CST) == 0)
			usleep(1000);
	}
	printf("%d %d\n", (int)syscall(SYS_gettid), wtid);
	fflush(stdout);
	for (;;) {
		hot_loop();
		cold_loop();
	}
}
