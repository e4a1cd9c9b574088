// Package kubelet keeps what the node's kubelet says about its pods
// (GET /pods: namespace, name, uid, node, labels and annotations), so that a
// source can add a pod's labels to the lines its containers write. A
// goroutine refreshes the copy in the background; a lookup reads it and
// never waits for the kubelet, whether it answers slowly, refuses or is down.
package kubelet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/logthrottle"
	"github.com/sluicehq/sluice/internal/panics"
)

// Defaults of Config.
const (
	DefaultURL       = "https://127.0.0.1:10250"
	DefaultTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	DefaultCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
	DefaultRefresh   = 30 * time.Second
	DefaultTimeout   = 5 * time.Second
	DefaultMaxPods   = 2000
	// DefaultMaxBody bounds the /pods answer read: a node's pods with
	// their annotations are well under it.
	DefaultMaxBody = 64 << 20
	// minInterval is the least time between two requests: a lookup of a pod
	// the copy does not know asks for a refresh, and a node full of such
	// pods must not turn that into a request per line.
	minInterval = time.Second
)

// Config says where the kubelet is and what to keep of its pods.
type Config struct {
	// URL is the kubelet's base URL: https://HOST:10250 (authenticated,
	// with the token) or http://HOST:10255 (the read-only port).
	URL string
	// TokenFile holds the bearer token sent over https, read again for each
	// request (service account tokens are rotated); "" sends none.
	TokenFile string
	// CAFile holds the CAs that sign the kubelet's serving certificate;
	// "" uses the system's.
	CAFile string
	// InsecureSkipVerify accepts any certificate (a kubelet with a
	// self-signed serving certificate).
	InsecureSkipVerify bool
	// Refresh is how often the pods are fetched; Timeout bounds a request.
	Refresh, Timeout time.Duration
	// MaxPods bounds how many pods are kept; the rest are logged.
	MaxPods int
	// MaxBody bounds the bytes of an answer (DefaultMaxBody).
	MaxBody int64
	// Labels and Annotations name the labels and annotations kept of each
	// pod; "*" keeps them all.
	Labels, Annotations []string
	// Requests and Failures count the requests made and those that failed;
	// nil counts nowhere.
	Requests, Failures *atomic.Int64
	// Name says whose cache it is in log lines ("taildir source r1").
	Name string
	Log  *slog.Logger
}

// Pod is what the cache keeps of a pod. It is shared: do not modify it.
type Pod struct {
	Namespace, Name, UID, Node string
	Labels, Annotations        map[string]string
}

// snapshot is one answer of the kubelet, looked up without locks.
type snapshot struct {
	byUID  map[string]*Pod
	byName map[string]*Pod // namespace + "/" + name
	gen    uint64
}

// Cache is the copy of the kubelet's pods. Build it with New, Start it,
// Stop it.
type Cache struct {
	cfg    Config
	log    *slog.Logger
	client *http.Client
	url    string
	streak *logthrottle.Streak

	pods      atomic.Pointer[snapshot]
	lastStart atomic.Int64 // Unix nanos the last request started
	missMu    sync.Mutex
	missed    map[string]int64 // pods looked up and not known: when first
	kick      chan struct{}
	ready     chan struct{} // closed once the first request ended, well or not
	once      sync.Once
	stop      context.CancelFunc
	done      chan struct{}
}

// New checks cfg and builds a cache; it makes no request.
func New(cfg Config) (*Cache, error) {
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxPods <= 0 {
		cfg.MaxPods = DefaultMaxPods
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	base := strings.TrimRight(cfg.URL, "/")
	if !strings.HasPrefix(base, "https://") && !strings.HasPrefix(base, "http://") {
		return nil, fmt.Errorf("kubelet URL %q is not http:// or https://", cfg.URL)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureSkipVerify}
	if cfg.CAFile != "" && strings.HasPrefix(base, "https://") && !cfg.InsecureSkipVerify {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kubelet CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kubelet CA file %s holds no PEM certificate", cfg.CAFile)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	log := cfg.Log.With("kubelet", base)
	c := &Cache{
		cfg: cfg, log: log, client: &http.Client{Transport: tr, Timeout: cfg.Timeout}, url: base + "/pods",
		kick: make(chan struct{}, 1), ready: make(chan struct{}), done: make(chan struct{}),
		streak: &logthrottle.Streak{Log: log, Level: slog.LevelWarn,
			Failed:    cfg.Name + ": cannot get the pods from the kubelet; lines go on with the metadata of their paths only",
			Recovered: cfg.Name + ": gets the pods from the kubelet again"},
	}
	c.pods.Store(&snapshot{})
	return c, nil
}

// Start starts the goroutine that fetches the pods now and then every
// Refresh, until Stop.
func (c *Cache) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	panics.Go(c.cfg.Name+": kubelet pods", func() { c.run(ctx) })
}

// Stop ends the goroutine, cancelling a request in flight, and waits for it.
func (c *Cache) Stop() {
	if c.stop == nil {
		return
	}
	c.stop()
	<-c.done
	c.streak.Stop()
}

// Ready is closed once the first request has ended, with pods or not.
func (c *Cache) Ready() <-chan struct{} { return c.ready }

// Generation changes whenever the copy is replaced, so a caller can keep
// what it looked up until then.
func (c *Cache) Generation() uint64 { return c.pods.Load().gen }

// ByUID returns the pod with uid, or nil when the copy does not know it.
// It never waits. A pod not known is asked for once: a refresh follows
// unless one has started since the pod was first looked up (a pod the
// kubelet no longer lists, whose files are still read, does not make a
// request a second).
func (c *Cache) ByUID(uid string) *Pod {
	if p := c.pods.Load().byUID[uid]; p != nil {
		return p
	}
	c.miss(uid)
	return nil
}

// ByName returns the pod namespace/name, or nil as ByUID does.
func (c *Cache) ByName(namespace, name string) *Pod {
	key := namespace + "/" + name
	if p := c.pods.Load().byName[key]; p != nil {
		return p
	}
	c.miss(key)
	return nil
}

// maxMissed bounds the pods remembered as missed.
const maxMissed = 4096

func (c *Cache) miss(key string) {
	now := time.Now().UnixNano()
	c.missMu.Lock()
	first, ok := c.missed[key]
	if !ok {
		if c.missed == nil || len(c.missed) >= maxMissed {
			c.missed = map[string]int64{}
		}
		c.missed[key], first = now, now
	}
	c.missMu.Unlock()
	if c.lastStart.Load() < first {
		c.Kick()
	}
}

// Kick asks for a refresh soon (at most one request a second).
func (c *Cache) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Cache) run(ctx context.Context) {
	defer close(c.done)
	defer c.once.Do(func() { close(c.ready) })
	var lastEnd time.Time
	wait := time.Duration(0)
	backoff := minInterval
	tm := time.NewTimer(0)
	defer tm.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tm.C:
		case <-c.kick:
			// Asked for by a lookup: not before minInterval after the last.
			if !tm.Stop() {
				select {
				case <-tm.C:
				default:
				}
			}
			if d := time.Until(lastEnd.Add(wait)); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}
		c.lastStart.Store(time.Now().UnixNano())
		err := c.fetch(ctx)
		lastEnd = time.Now()
		if ctx.Err() != nil {
			return
		}
		next := c.cfg.Refresh
		if err != nil {
			if c.cfg.Failures != nil {
				c.cfg.Failures.Add(1)
			}
			c.streak.Fail(err)
			next = min(backoff, c.cfg.Refresh)
			backoff = min(2*backoff, c.cfg.Refresh)
			wait = next // lookups do not hurry a kubelet that fails
		} else {
			c.streak.Ok()
			backoff, wait = minInterval, minInterval
		}
		c.once.Do(func() { close(c.ready) })
		tm.Reset(next)
		// Kicks that came during the request are answered by it.
		select {
		case <-c.kick:
		default:
		}
	}
}

// podList is the part of a v1 PodList that is read.
type podList struct {
	Kind  string `json:"kind"`
	Items []struct {
		Metadata struct {
			Name        string            `json:"name"`
			Namespace   string            `json:"namespace"`
			UID         string            `json:"uid"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			NodeName string `json:"nodeName"`
		} `json:"spec"`
	} `json:"items"`
}

// fetch gets the pods and replaces the copy.
func (c *Cache) fetch(ctx context.Context) error {
	if c.cfg.Requests != nil {
		c.cfg.Requests.Add(1)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if c.cfg.TokenFile != "" && strings.HasPrefix(c.url, "https://") {
		tok, err := os.ReadFile(c.cfg.TokenFile)
		if err != nil {
			return fmt.Errorf("service account token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", c.url, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // lets the connection be reused; an error only loses that
		return fmt.Errorf("GET %s: %s: the kubelet refuses the service account; it needs get on nodes/pods (kubelets 1.33 and later) or nodes/proxy (older ones), and a token (tokenFile)", c.url, resp.Status)
	case resp.StatusCode != http.StatusOK:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10)) // lets the connection be reused; an error only loses that
		return fmt.Errorf("GET %s: %s", c.url, resp.Status)
	}
	var list podList
	body := io.LimitReader(resp.Body, c.cfg.MaxBody+1)
	dec := json.NewDecoder(body)
	if err := dec.Decode(&list); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) && body.(*io.LimitedReader).N == 0 {
			return fmt.Errorf("GET %s: the answer is longer than %d bytes", c.url, c.cfg.MaxBody)
		}
		return fmt.Errorf("GET %s: not a PodList: %w", c.url, err)
	}
	if list.Kind != "" && list.Kind != "PodList" {
		return fmt.Errorf("GET %s: a %s, not a PodList", c.url, list.Kind)
	}
	old := c.pods.Load()
	snap := &snapshot{byUID: make(map[string]*Pod, len(list.Items)), byName: make(map[string]*Pod, len(list.Items)), gen: old.gen + 1}
	for i, it := range list.Items {
		if i >= c.cfg.MaxPods {
			c.log.Warn(c.cfg.Name+": the kubelet lists more pods than maxPods; the others get no kubelet metadata",
				"pods", len(list.Items), "maxPods", c.cfg.MaxPods)
			break
		}
		m := it.Metadata
		p := &Pod{Namespace: m.Namespace, Name: m.Name, UID: m.UID, Node: it.Spec.NodeName,
			Labels: pick(m.Labels, c.cfg.Labels), Annotations: pick(m.Annotations, c.cfg.Annotations)}
		if p.UID != "" {
			snap.byUID[p.UID] = p
		}
		snap.byName[p.Namespace+"/"+p.Name] = p
		// A static pod's files are named by its config hash, which the
		// mirror pod the API server shows carries as an annotation.
		if h := m.Annotations["kubernetes.io/config.hash"]; h != "" && h != p.UID {
			snap.byUID[h] = p
		}
	}
	c.pods.Store(snap)
	return nil
}

// pick returns the entries of m named in keys ("*": all), or nil.
func pick(m map[string]string, keys []string) map[string]string {
	if len(m) == 0 || len(keys) == 0 {
		return nil
	}
	if slices.Contains(keys, "*") {
		return m
	}
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
}
