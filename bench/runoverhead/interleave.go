package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/rootline/rootline/internal/loadgen"
	"github.com/rootline/rootline/internal/overhead"
)

// With --interleave every mode's chain runs at once and one open-loop
// timetable of rate × len(modes) requests a second sends its i-th request to
// mode i mod len(modes): the modes take turns request by request, so each
// sees the same moments of the machine, and its drift and its neighbours'
// noise fall out of the ratios. What it measures is the cost on the
// request's path; CPU a mode spends off the path (a supervisor reading its
// ring, say) slows every mode alike and is seen in the CPU column only.

// iresult is what one mode measured over all rounds of an interleaved run.
type iresult struct {
	hist    loadgen.Histogram
	errors  int64
	cpu     time.Duration
	own     time.Duration // of the chain's top processes alone (`rootline run` itself, in run modes)
	sent    int64
	windows []iwindow // per second of each round, in order
}

// iwindow is one second of one mode's requests (by intended send time).
type iwindow struct {
	sum  time.Duration
	n    int64
	lats []time.Duration
}

func (w iwindow) mean() float64 { return float64(w.sum) / float64(w.n) }

// measureInterleaved runs one round at one rate and adds to res (one per mode).
func measureInterleaved(rootline, chain string, modes []string, rate float64, d time.Duration, spin int, res []*iresult) {
	runs := make([]*chainRun, len(modes))
	for i, m := range modes {
		runs[i] = startChain(rootline, chain, m, spin)
		defer runs[i].stop()
	}
	clients := make([]*http.Client, len(modes))
	for i := range clients {
		tr := &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}
		defer tr.CloseIdleConnections()
		clients[i] = &http.Client{Transport: tr, Timeout: 5 * time.Second}
	}
	send := func(rate float64, dur time.Duration, record bool) {
		total := rate * float64(len(modes))
		count := int(total * dur.Seconds())
		start := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		nwin := int(math.Ceil(dur.Seconds()))
		wins := make([][]iwindow, len(modes))
		for i := range wins {
			wins[i] = make([]iwindow, nwin)
		}
		sem := make(chan struct{}, 256)
		for i := range count {
			due := start.Add(time.Duration(float64(i) / total * float64(time.Second)))
			time.Sleep(time.Until(due))
			m := i % len(modes)
			select {
			case sem <- struct{}{}:
			default:
				if record {
					mu.Lock()
					res[m].errors++
					mu.Unlock()
				}
				continue
			}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				ok := get(clients[m], runs[m].url)
				lat := time.Since(due)
				if !record {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				res[m].sent++
				if !ok {
					res[m].errors++
				}
				res[m].hist.Record(lat)
				w := min(int(due.Sub(start)/time.Second), nwin-1)
				wins[m][w].sum += lat
				wins[m][w].n++
				wins[m][w].lats = append(wins[m][w].lats, lat)
			}()
		}
		wg.Wait()
		if record {
			for m := range modes {
				res[m].windows = append(res[m].windows, wins[m]...)
			}
		}
	}
	send(rate, 2*time.Second, false) // warm up
	cpu0 := make([]time.Duration, len(modes))
	own0 := make([]time.Duration, len(modes))
	ownCPU := func(r *chainRun) time.Duration {
		var t time.Duration
		for _, pid := range r.pids {
			t += overhead.CPU(pid)
		}
		return t
	}
	for i, r := range runs {
		cpu0[i], own0[i] = overhead.TreeCPU(r.pids...), ownCPU(r)
	}
	send(rate, d, true)
	for i, r := range runs {
		res[i].cpu += overhead.TreeCPU(r.pids...) - cpu0[i]
		res[i].own += ownCPU(r) - own0[i]
	}
}

func get(c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	buf := make([]byte, 512)
	for {
		if _, err := resp.Body.Read(buf); err != nil {
			break
		}
	}
	return resp.StatusCode == http.StatusOK
}

// ratioCI is the mean over the windows of mode's mean latency over base's in
// the same window, with the half-width of its 95 % interval.
func ratioCI(mode, base *iresult) (float64, float64) {
	var rs []float64
	for i := range min(len(mode.windows), len(base.windows)) {
		if mode.windows[i].n > 0 && base.windows[i].n > 0 {
			rs = append(rs, mode.windows[i].mean()/base.windows[i].mean())
		}
	}
	if len(rs) < 2 {
		return math.NaN(), math.NaN()
	}
	var sum, sq float64
	for _, r := range rs {
		sum += r
	}
	mean := sum / float64(len(rs))
	for _, r := range rs {
		sq += (r - mean) * (r - mean)
	}
	sd := math.Sqrt(sq / float64(len(rs)-1))
	return mean, 1.96 * sd / math.Sqrt(float64(len(rs)))
}

// p99RatioCI is mode's p99 over base's, and a 95 % interval for it from a
// paired block bootstrap: the same one-second windows are drawn, with
// replacement, for both modes (a window's requests stay together, as the
// machine's moments do), 1,000 times.
func p99RatioCI(mode, base *iresult) (ratio, lo, hi float64) {
	n := min(len(mode.windows), len(base.windows))
	p99 := func(r *iresult, idx []int) float64 {
		var all []time.Duration
		for _, i := range idx {
			all = append(all, r.windows[i].lats...)
		}
		if len(all) == 0 {
			return math.NaN()
		}
		slices.Sort(all)
		return float64(all[min(len(all)-1, int(math.Ceil(0.99*float64(len(all))))-1)])
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	ratio = p99(mode, idx) / p99(base, idx)
	if n < 2 {
		return ratio, math.NaN(), math.NaN()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var rs []float64
	for range 1000 {
		for i := range idx {
			idx[i] = rng.IntN(n)
		}
		if r := p99(mode, idx) / p99(base, idx); !math.IsNaN(r) {
			rs = append(rs, r)
		}
	}
	slices.Sort(rs)
	if len(rs) == 0 {
		return ratio, math.NaN(), math.NaN()
	}
	return ratio, rs[len(rs)*25/1000], rs[len(rs)*975/1000]
}

// runInterleaved is main's --interleave path.
func runInterleaved(rootline, chain string, modes []string, rates []float64, d time.Duration, rounds, spin int) {
	results := map[float64][]*iresult{}
	for _, rate := range rates {
		for range modes {
			results[rate] = append(results[rate], &iresult{})
		}
	}
	for round := range rounds {
		for _, rate := range rates {
			res := results[rate]
			before := make([]int64, len(modes))
			for i, r := range res {
				before[i] = r.hist.Count()
			}
			measureInterleaved(rootline, chain, modes, rate, d, spin, res)
			for i, m := range modes {
				fmt.Fprintf(os.Stderr, "round %d rate %.0f %-5s requests %d mean so far %v\n",
					round+1, rate, m, res[i].hist.Count()-before[i], res[i].hist.Mean().Round(time.Microsecond))
			}
		}
	}
	fmt.Printf("| rate (req/s) | mode | mean | p50 | p99 | CPU per request | of which the top processes | mean × %s (95 %% CI) | p99 × %s (95 %% CI) | CPU × %s | errors |\n", modes[0], modes[0], modes[0])
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, rate := range rates {
		res := results[rate]
		base := res[0]
		bcpu := base.cpu / time.Duration(max(base.sent, 1))
		for i, m := range modes {
			r := res[i]
			cpu := r.cpu / time.Duration(max(r.sent, 1))
			ratio, ci := ratioCI(r, base)
			own := r.own / time.Duration(max(r.sent, 1))
			p99r, p99lo, p99hi := p99RatioCI(r, base)
			fmt.Printf("| %.0f | %s | %v | %v | %v | %v | %v | %.3f ± %.3f | %.3f (%.3f–%.3f) | %.2f | %d |\n", rate, m,
				r.hist.Mean().Round(time.Microsecond), r.hist.Quantile(0.5).Round(time.Microsecond),
				r.hist.Quantile(0.99).Round(time.Microsecond), cpu.Round(time.Microsecond), own.Round(time.Microsecond),
				ratio, ci, p99r, p99lo, p99hi, float64(cpu)/float64(bcpu), r.errors)
		}
	}
}
