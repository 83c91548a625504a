// Command arrivals_server is the yardstick of cliffwatch's whole-run and peer benchmarks: a light HTTP/1.1
// server on 127.0.0.1 that answers after a fixed delay and records the arrival time of every request, so
// that the rate and pacing a load tool achieved are measured by the server, not by the tool.
//
// Every request except the control paths is answered after -latency-ms:
//
//   - POST /v1/chat/completions: an OpenAI chat stream (text/event-stream): a role chunk and the first token
//     chunk, then one token chunk every -chunk-interval-ms (timed from the first, so timer overshoot does not
//     add up) until -chunks tokens were sent, then a closing chunk with finish_reason and "data: [DONE]".
//   - anything else: {"ok":true}.
//
// Chat requests that do not ask for a stream are answered (with a stream) but not recorded either.
// Requests for the root path "/" are answered but not recorded: that is where load tools probe a target
// before their load (cliffwatch's preflight), so the benchmarks send their load to /load.
//
// Control paths (not recorded): GET /__arrivals returns {"ns": [...]} (arrival times in nanoseconds of
// the server's monotonic clock, in arrival order) and forgets them; GET /__stats returns
// {"requests": n, "cpu_s": s} (this process's CPU time).
//
// It prints "PORT <n>" once it listens and exits when its standard input closes, so it dies with the
// benchmark. It uses only Go's standard library; run it with GOMAXPROCS=1 pinned to one core.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
)

type recorder struct {
	mu       sync.Mutex
	start    time.Time
	arrivals []int64
	total    int64
}

func (r *recorder) record() {
	ns := time.Since(r.start).Nanoseconds() // monotonic: time.Since reads the monotonic clock
	r.mu.Lock()
	r.arrivals = append(r.arrivals, ns)
	r.total++
	r.mu.Unlock()
}

func (r *recorder) drain() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.arrivals
	r.arrivals = make([]int64, 0, 1<<16)
	return out
}

func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return -1
	}
	return float64(usage.Utime.Nano()+usage.Stime.Nano()) / 1e9
}

func chunk(delta string, finish string) []byte {
	finishJSON := "null"
	if finish != "" {
		finishJSON = `"` + finish + `"`
	}
	return []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"bench",` +
		`"choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + finishJSON + `}]}` + "\n\n")
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	latencyMs := flag.Float64("latency-ms", 20, "delay before every answer")
	chunks := flag.Int("chunks", 16, "token chunks per stream")
	intervalMs := flag.Float64("chunk-interval-ms", 2, "time between token chunks")
	flag.Parse()

	host, _, err := net.SplitHostPort(*addr)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		fmt.Fprintln(os.Stderr, "arrivals_server: -addr must be a loopback address")
		os.Exit(2)
	}
	latency := time.Duration(*latencyMs * float64(time.Millisecond))
	interval := time.Duration(*intervalMs * float64(time.Millisecond))
	rec := &recorder{start: time.Now(), arrivals: make([]int64, 0, 1<<16)}
	roleChunk := chunk(`{"role":"assistant"}`, "")
	tokenChunk := chunk(`{"content":" tok"}`, "")
	closing := append(chunk(`{}`, "stop"), []byte("data: [DONE]\n\n")...)

	mux := http.NewServeMux()
	mux.HandleFunc("/__arrivals", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string][]int64{"ns": rec.drain()})
	})
	mux.HandleFunc("/__stats", func(w http.ResponseWriter, _ *http.Request) {
		rec.mu.Lock()
		total := rec.total
		rec.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"requests": total, "cpu_s": cpuSeconds()})
	})
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"stream":true`)) || bytes.Contains(body, []byte(`"stream": true`)) {
			rec.record() // a tool's non-streamed probes (cliffwatch's prompt calibration) are not its load
		}
		time.Sleep(latency)
		flusher, _ := w.(http.Flusher)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(roleChunk)
		first := time.Now()
		for i := 0; i < *chunks; i++ {
			if i > 0 {
				if wait := time.Until(first.Add(time.Duration(i) * interval)); wait > 0 {
					time.Sleep(wait)
				}
			}
			_, _ = w.Write(tokenChunk)
			if flusher != nil {
				flusher.Flush()
			}
		}
		_, _ = w.Write(closing)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			rec.record()
		}
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(latency)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "11")
		_, _ = w.Write([]byte(`{"ok":true}`))
	})

	listener, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "arrivals_server:", err)
		os.Exit(1)
	}
	fmt.Printf("PORT %d\n", listener.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()
	go func() { // dies with the benchmark that started it
		_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
		os.Exit(0)
	}()
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	_ = server.Serve(listener)
}
