// The datapath's arrival bookkeeping (bpf/run/arrival.h) built for user
// space, driven by lines on stdin for arrival_test.go:
//   n SEQ END RCV_NXT TS   a segment [SEQ, END) taken at TS, RCV_NXT expected
//   a SEQ                  print arrival_of(SEQ)
//   r                      forget everything (a new connection)
#include <stdio.h>
#include <string.h>
#include <linux/types.h>

#undef __always_inline
#define __always_inline inline __attribute__((always_inline))
#include "run/arrival.h"

int main(void)
{
	struct arrivals r;
	memset(&r, 0, sizeof(r));
	char op;
	while (scanf(" %c", &op) == 1) {
		unsigned int seq, end, nxt;
		unsigned long long ts;
		switch (op) {
		case 'n':
			if (scanf("%u %u %u %llu", &seq, &end, &nxt, &ts) != 4)
				return 2;
			arrival_note(&r, seq, end, nxt, ts);
			break;
		case 'a':
			if (scanf("%u", &seq) != 1)
				return 2;
			printf("%llu\n", (unsigned long long)arrival_of(&r, seq));
			fflush(stdout);
			break;
		case 'r':
			memset(&r, 0, sizeof(r));
			break;
		default:
			return 2;
		}
	}
	return 0;
}
