// Helpers shared by the recorder's test programs (workload.c, critpath.c):
// times are CLOCK_MONOTONIC ns, the clock the recorder's records use.
#pragma once

#ifndef _GNU_SOURCE
#define _GNU_SOURCE // pthread_setname_np; MUST come before the first include
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void spin_ns(long long ns)
{
	long long end = now_ns() + ns;
	while (now_ns() < end)
		;
}

static void sleep_ns(long long ns)
{
	struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
	clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
}

// wait_line waits for a line on stdin; the program exits when stdin closes.
static void wait_line(void)
{
	char buf[64];
	if (!fgets(buf, sizeof(buf), stdin))
		exit(0);
}

// announce names the calling thread and prints "tid <label> <tid>".
static void announce(const char *label)
{
	pthread_setname_np(pthread_self(), label);
	printf("tid %s %ld\n", label, (long)syscall(SYS_gettid));
	fflush(stdout);
}
