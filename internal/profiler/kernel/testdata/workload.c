// Workloads for the kernel recorder's accuracy tests (recorder_bpf_test.go).
// Every mode prints "ready", waits for a line on stdin, runs, prints "done"
// and waits for stdin to close, so that its threads are alive (and blocked)
// when the test reads /proc.
//
//   workload oncpu            2 threads alternating spins and short sleeps
//   workload blocking <dir>   one thread per blocking reason (futex, sleep,
//                             TCP read, fsync); prints "tid <label> <tid>"
//   workload hog              spin until killed
//   workload lat <ms>         sleep 2 ms, spin 200 us, for <ms> milliseconds
//   workload pingpong <rate> <s> [fork]  two threads (with fork: two
//                             processes) ping-pong over pipes, <rate> round
//                             trips per second for <s> seconds (no stdin
//                             protocol; bench/kernel-overhead.sh)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testprog.h"

static pthread_barrier_t start_b, end_b;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char *dir;
static int lsock;

static void *oncpu(void *arg)
{
	announce(arg);
	pthread_barrier_wait(&start_b);
	for (int i = 0; i < 300; i++) {
		spin_ns(3000000);
		sleep_ns(1000000);
	}
	pthread_barrier_wait(&end_b);
	for (;;)
		pause();
	return NULL;
}

static void *holder(void *arg)
{
	announce("holder");
	pthread_barrier_wait(&start_b);
	pthread_mutex_lock(&lock);
	sleep_ns(50000000); // let the waiter block
	spin_ns(20000000);
	pthread_mutex_unlock(&lock);
	pthread_barrier_wait(&end_b);
	return NULL;
}

static void *waiter(void *arg)
{
	announce("waiter");
	pthread_barrier_wait(&start_b);
	sleep_ns(10000000); // the holder locks first
	pthread_mutex_lock(&lock);
	pthread_mutex_unlock(&lock);
	pthread_barrier_wait(&end_b);
	return NULL;
}

static void *sleeper(void *arg)
{
	announce("sleeper");
	pthread_barrier_wait(&start_b);
	sleep_ns(100000000);
	pthread_barrier_wait(&end_b);
	return NULL;
}

static void *netreader(void *arg)
{
	announce("netreader");
	pthread_barrier_wait(&start_b);
	int c = accept(lsock, NULL, NULL);
	char buf[16];
	if (c < 0 || read(c, buf, sizeof(buf)) < 0)
		perror("netreader");
	close(c);
	pthread_barrier_wait(&end_b);
	return NULL;
}

static void *netwriter(void *arg)
{
	announce("netwriter");
	struct sockaddr_in a;
	socklen_t al = sizeof(a);
	getsockname(lsock, (struct sockaddr *)&a, &al);
	pthread_barrier_wait(&start_b);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(s, (struct sockaddr *)&a, al) < 0)
		perror("connect");
	sleep_ns(80000000); // the reader blocks in read meanwhile
	if (write(s, "ping", 4) != 4)
		perror("write");
	close(s);
	pthread_barrier_wait(&end_b);
	return NULL;
}

static void *fsyncer(void *arg)
{
	announce("fsyncer");
	char path[4096];
	snprintf(path, sizeof(path), "%s/fsync.dat", dir);
	static char block[1 << 20];
	memset(block, 'x', sizeof(block));
	pthread_barrier_wait(&start_b);
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
	for (int i = 0; i < 8; i++)
		if (write(fd, block, sizeof(block)) != sizeof(block))
			perror("write");
	if (fsync(fd) < 0)
		perror("fsync");
	// Drop the file's pages from the page cache, then fault them back in
	// through a mapping: the thread blocks in page faults (major faults).
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	fd = open(path, O_RDONLY);
	volatile char *m = mmap(NULL, sizeof(block) * 8, PROT_READ, MAP_PRIVATE, fd, 0);
	long sum = 0;
	if (m != MAP_FAILED)
		for (size_t off = 0; off < sizeof(block) * 8; off += 4096)
			sum += m[off];
	if (sum == 0)
		fprintf(stderr, "no data\n");
	close(fd);
	pthread_barrier_wait(&end_b);
	return NULL;
}

static int ping[2], pong[2];

static void *ponger(void *arg)
{
	char c;
	while (read(ping[0], &c, 1) == 1)
		if (write(pong[1], &c, 1) != 1)
			break;
	return NULL;
}

static int pingpong(long rate, long secs, int use_fork)
{
	pthread_t t;
	pid_t child = 0;
	if (pipe(ping) || pipe(pong))
		return 1;
	if (use_fork) {
		child = fork();
		if (child == 0) {
			close(ping[1]);
			ponger(NULL);
			_exit(0);
		}
		close(ping[0]);
	} else {
		pthread_create(&t, NULL, ponger, NULL);
	}
	long per_tick = rate / 100; // 10 ms ticks
	long long start = now_ns(), next = start;
	char c = 'x';
	for (long tick = 0; tick < secs * 100; tick++) {
		for (long i = 0; i < per_tick; i++)
			if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
				return 1;
		next += 10000000;
		long long d = next - now_ns();
		if (d > 0)
			sleep_ns(d);
	}
	close(ping[1]);
	if (use_fork)
		waitpid(child, NULL, 0);
	else
		pthread_join(t, NULL);
	printf("pingpong: %ld round trips in %.3f s\n", per_tick * secs * 100, (now_ns() - start) / 1e9);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "hog")) {
		for (;;)
			;
	}
	if (!strcmp(argv[1], "pingpong") && argc > 3)
		return pingpong(atol(argv[2]), atol(argv[3]), argc > 4 && !strcmp(argv[4], "fork"));
	if (!strcmp(argv[1], "lat")) {
		long long end;
		printf("ready\n");
		wait_line();
		end = now_ns() + atoll(argv[2]) * 1000000LL;
		while (now_ns() < end) {
			sleep_ns(2000000);
			spin_ns(200000);
		}
		printf("done\n");
		wait_line();
		return 0;
	}
	pthread_t th[8];
	int n = 0;
	if (!strcmp(argv[1], "oncpu")) {
		pthread_barrier_init(&start_b, NULL, 3);
		pthread_barrier_init(&end_b, NULL, 3);
		pthread_create(&th[n++], NULL, oncpu, "spin1");
		pthread_create(&th[n++], NULL, oncpu, "spin2");
	} else if (!strcmp(argv[1], "blocking") && argc > 2) {
		dir = argv[2];
		lsock = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		if (bind(lsock, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lsock, 4) < 0) {
			perror("listen");
			return 1;
		}
		pthread_barrier_init(&start_b, NULL, 7);
		pthread_barrier_init(&end_b, NULL, 7);
		pthread_create(&th[n++], NULL, holder, NULL);
		pthread_create(&th[n++], NULL, waiter, NULL);
		pthread_create(&th[n++], NULL, sleeper, NULL);
		pthread_create(&th[n++], NULL, netreader, NULL);
		pthread_create(&th[n++], NULL, netwriter, NULL);
		pthread_create(&th[n++], NULL, fsyncer, NULL);
	} else {
		return 2;
	}
	usleep(100000); // the threads announce themselves
	printf("ready\n");
	wait_line();
	pthread_barrier_wait(&start_b);
	pthread_barrier_wait(&end_b);
	printf("done\n");
	wait_line();
	return 0;
}
