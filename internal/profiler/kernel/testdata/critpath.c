// Ground-truth programs for the recorder's per-state accuracy tests
// (accuracy_bpf_test.go). Every mode prints "tid <label> <tid>" for the
// threads the test looks at, then "ready", waits for a line on stdin, runs,
// prints what it measured itself and "done", and waits for stdin to close
// (so that its threads are still alive when the test reads /proc).
// Times printed are CLOCK_MONOTONIC ns.
//
//   critpath spin <ms>             one thread spins for <ms> of wall time
//   critpath contend <n> <ms>      <n> threads, each: spin 4 ms, sleep 1 ms,
//                                  for <ms> of wall time
//   critpath fsync <dir> <n>       write 256 KiB and fsync, <n> times; prints
//                                  "call <start> <end>" per fsync
//   critpath mutex <rounds> <ms>   a holder locks a pthread mutex and spins
//                                  <ms> while a waiter blocks on it; prints
//                                  "call <start> <end>" per lock of the waiter
//                                  and "mark <ts>" per unlock of the holder
//   critpath sleep <n> <ms>        clock_nanosleep <ms>, <n> times; "call …"
//   critpath recv <n>              listen on 127.0.0.1 (prints "port <p>"),
//                                  accept one connection, then read <n>
//                                  messages; "call …" per read
//   critpath send <port> <n> <ms>  connect, then <n> times: sleep <ms>, send
//                                  (no stdin protocol; the sender process)
//   critpath relay <port> <n>      connect to <port>, listen (prints "port <p>"),
//                                  accept one connection, forward <n> messages
//                                  from it, printing "mark <ts>" before each
//                                  send (no stdin protocol)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "testprog.h"

static void call(long long start, long long end)
{
	printf("call %lld %lld\n", start, end);
}

static int dial(int port)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("connect");
		exit(1);
	}
	return s;
}

static int listen_any(void)
{
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 4) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0) {
		perror("listen");
		exit(1);
	}
	printf("port %d\n", ntohs(a.sin_port));
	return l;
}

static void read_full(int fd, char *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r <= 0) {
			perror("read");
			exit(1);
		}
		got += r;
	}
}

static long long run_ms;
static pthread_barrier_t start_b;

static pthread_barrier_t end_b;

static void *contender(void *arg)
{
	announce(arg);
	pthread_barrier_wait(&start_b);
	long long end = now_ns() + run_ms * 1000000LL;
	while (now_ns() < end) {
		spin_ns(4000000);
		sleep_ns(1000000);
	}
	// Stay alive (blocked) until the process exits: the test reads the
	// thread's schedstat after the run.
	pthread_barrier_wait(&end_b);
	for (;;)
		pause();
	return NULL;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t round_b;
static int rounds;

static void *holder(void *arg)
{
	announce("holder");
	pthread_barrier_wait(&start_b);
	for (int i = 0; i < rounds; i++) {
		pthread_mutex_lock(&lock);
		pthread_barrier_wait(&round_b); // the waiter goes for the lock now
		spin_ns(run_ms * 1000000LL);
		printf("mark %lld\n", now_ns()); // the unlock wakes the waiter now
		pthread_mutex_unlock(&lock);
		pthread_barrier_wait(&round_b);
	}
	return NULL;
}

static void *waiter(void *arg)
{
	announce("waiter");
	pthread_barrier_wait(&start_b);
	for (int i = 0; i < rounds; i++) {
		pthread_barrier_wait(&round_b);
		long long t0 = now_ns();
		pthread_mutex_lock(&lock);
		long long t1 = now_ns();
		pthread_mutex_unlock(&lock);
		call(t0, t1);
		pthread_barrier_wait(&round_b);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *mode = argv[1];
	if (!strcmp(mode, "send") && argc > 4) {
		// The sender is another process: no stdin protocol.
		announce("sender");
		int s = dial(atoi(argv[2]));
		int n = atoi(argv[3]);
		long long ms = atoll(argv[4]);
		for (int i = 0; i < n; i++) {
			sleep_ns(ms * 1000000LL);
			if (write(s, "ping", 4) != 4) {
				perror("write");
				return 1;
			}
		}
		close(s);
		return 0;
	}
	if (!strcmp(mode, "relay") && argc > 3) {
		announce("relay");
		int out = dial(atoi(argv[2]));
		int l = listen_any();
		int in = accept(l, NULL, NULL);
		char buf[4];
		for (int i = 0, n = atoi(argv[3]); i < n; i++) {
			read_full(in, buf, sizeof(buf));
			printf("mark %lld\n", now_ns());
			if (write(out, buf, sizeof(buf)) != sizeof(buf)) {
				perror("write");
				return 1;
			}
		}
		close(in);
		close(out);
		return 0;
	}
	pthread_t th[16];
	int nth = 0;
	int lsock = -1, n = 0;
	long long ms = 0;
	const char *dir = NULL;
	if (!strcmp(mode, "spin") && argc > 2) {
		run_ms = atoll(argv[2]);
		announce("spinner");
	} else if (!strcmp(mode, "contend") && argc > 3) {
		n = atoi(argv[2]);
		run_ms = atoll(argv[3]);
		if (n < 1 || n > 16)
			return 2;
		pthread_barrier_init(&start_b, NULL, n + 1);
		pthread_barrier_init(&end_b, NULL, n + 1);
		static char labels[16][24];
		for (int i = 0; i < n; i++) {
			snprintf(labels[i], sizeof(labels[i]), "contend%d", i & 0xf);
			pthread_create(&th[nth++], NULL, contender, labels[i]);
		}
		usleep(100000); // the threads announce themselves
	} else if (!strcmp(mode, "fsync") && argc > 3) {
		dir = argv[2];
		n = atoi(argv[3]);
		announce("fsyncer");
	} else if (!strcmp(mode, "mutex") && argc > 3) {
		rounds = atoi(argv[2]);
		run_ms = atoll(argv[3]);
		pthread_barrier_init(&start_b, NULL, 3);
		pthread_barrier_init(&round_b, NULL, 2);
		pthread_create(&th[nth++], NULL, holder, NULL);
		pthread_create(&th[nth++], NULL, waiter, NULL);
		usleep(100000);
	} else if (!strcmp(mode, "sleep") && argc > 3) {
		n = atoi(argv[2]);
		ms = atoll(argv[3]);
		announce("sleeper");
	} else if (!strcmp(mode, "recv") && argc > 2) {
		n = atoi(argv[2]);
		announce("receiver");
		lsock = listen_any();
	} else {
		return 2;
	}
	printf("ready\n");
	wait_line();

	if (!strcmp(mode, "spin")) {
		spin_ns(run_ms * 1000000LL);
	} else if (!strcmp(mode, "contend")) {
		pthread_barrier_wait(&start_b);
		pthread_barrier_wait(&end_b);
	} else if (!strcmp(mode, "mutex")) {
		pthread_barrier_wait(&start_b);
		for (int i = 0; i < nth; i++)
			pthread_join(th[i], NULL);
	} else if (!strcmp(mode, "fsync")) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/fsync.dat", dir);
		static char block[256 << 10];
		memset(block, 'x', sizeof(block));
		int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
		if (fd < 0) {
			perror("open");
			return 1;
		}
		for (int i = 0; i < n; i++) {
			block[0] = i;
			if (write(fd, block, sizeof(block)) != sizeof(block))
				perror("write");
			long long t0 = now_ns();
			if (fsync(fd) < 0)
				perror("fsync");
			call(t0, now_ns());
		}
		close(fd);
	} else if (!strcmp(mode, "sleep")) {
		for (int i = 0; i < n; i++) {
			long long t0 = now_ns();
			sleep_ns(ms * 1000000LL);
			call(t0, now_ns());
		}
	} else if (!strcmp(mode, "recv")) {
		int c = accept(lsock, NULL, NULL);
		char buf[4];
		for (int i = 0; i < n; i++) {
			long long t0 = now_ns();
			read_full(c, buf, sizeof(buf));
			call(t0, now_ns());
		}
		close(c);
	}
	printf("done\n");
	wait_line();
	return 0;
}
