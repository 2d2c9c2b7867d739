// The user-space build of the datapath's request-head parser: what it
// answers for each head (read by internal/run/datapath/headparse).
#pragma once

#include <stdint.h>

struct hp_req {
	int32_t status;    // HP_*
	uint32_t head_len; // the head's length through its final line break (HP_HEAD)
	uint32_t has;      // HD_* bits (bpf/run/state.h)
	uint32_t is_head;  // a HEAD request
	uint64_t cl;       // Content-Length (HD_CL)
	uint8_t ctx_ok;    // a trace context was found
	uint8_t sampled;
	uint8_t w3c;       // from traceparent
	uint8_t denied;    // no context and a B3 decision not to sample
	uint8_t trace[16];
	uint64_t span;
	uint32_t ts_len;
	uint32_t rid_len;
	uint8_t ts[512];
	uint8_t rid[256];
	int32_t framing;   // responses: RB_* (bpf/run/parse.h)
	uint32_t rstatus;  // responses: the status code
	uint64_t server_us; // responses: the timing fields' server time (timed)
	uint64_t wait_us;   // responses: the largest wait they report (timed)
	uint32_t timed;     // responses: the timing fields gave a server time
	uint32_t _pad;
};

#define HP_NOT_HTTP -2   // the start line is not a request (status) line
#define HP_MORE -1       // the head has not ended
#define HP_HEAD 1        // a complete head

// hp_parse_request parses the request head at b[0:n) (n at most the bytes a
// connection keeps), fed in two pieces split at split (0: one piece), as
// request_read in bpf/run/spans.h decodes it.
void hp_parse_request(const uint8_t *b, uint32_t n, uint32_t split, struct hp_req *out);

// hp_parse_response parses a response head the same way, as response_read
// decodes it; head_req: it answers a HEAD request.
void hp_parse_response(const uint8_t *b, uint32_t n, uint32_t split, int head_req, struct hp_req *out);
