package hdfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/colinmarc/hdfs/v2"
	"github.com/colinmarc/hdfs/v2/hadoopconf"
)

// loadHadoopConf reads core-site.xml and hdfs-site.xml from dir
// (HADOOP_CONF_DIR), or returns an empty map.
func loadHadoopConf(dir string) map[string]string {
	if dir == "" {
		return map[string]string{}
	}
	conf, err := hadoopconf.Load(dir)
	if err != nil || conf == nil {
		return map[string]string{}
	}
	return conf
}

// hdfsStore writes files on HDFS with github.com/colinmarc/hdfs/v2, as
// Flume does: the in-use file is created, each batch is hflushed (the
// datanodes hold it; a reader sees it), and a closed file is renamed.
// HDFS cannot cut a file, so a batch whose write failed, or was torn by a
// crash, stays in the file (its events are written again: duplicates,
// never loss).
type hdfsStore struct {
	opts hdfs.ClientOptions
	name string

	mu     sync.Mutex
	client *hdfs.Client
}

func newHDFSStore(loc location, hc map[string]string) (*hdfsStore, error) {
	opts := hdfs.ClientOptionsFromConf(hadoopconf.HadoopConf(hc))
	if opts.KerberosClient != nil {
		return nil, errors.New("core-site.xml asks for Kerberos (hadoop.security.authentication=kerberos), which sluice's hdfs sink does not support")
	}
	if loc.host != "" {
		opts.Addresses = []string{loc.host}
	}
	if len(opts.Addresses) == 0 {
		return nil, errors.New("hdfs:/// names no namenode and HADOOP_CONF_DIR gives no fs.defaultFS; write hdfs://namenode:8020/dir")
	}
	for i, a := range opts.Addresses {
		if !strings.Contains(a, ":") {
			opts.Addresses[i] = a + ":8020"
		}
	}
	if u := os.Getenv("HADOOP_USER_NAME"); u != "" {
		opts.User = u
	} else if u := os.Getenv("USER"); u != "" {
		opts.User = u
	} else {
		opts.User = "sluice"
	}
	return &hdfsStore{opts: opts, name: "hdfs://" + strings.Join(opts.Addresses, ",")}, nil
}

func (s *hdfsStore) String() string { return s.name }

func (s *hdfsStore) get() (*hdfs.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		c, err := hdfs.NewClient(s.opts)
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", s.name, err)
		}
		s.client = c
	}
	return s.client, nil
}

// drop forgets a client after an error, so the next call reconnects.
func (s *hdfsStore) drop(c *hdfs.Client) {
	s.mu.Lock()
	if s.client == c {
		s.client = nil
		c.Close()
	}
	s.mu.Unlock()
}

func (s *hdfsStore) create(_ context.Context, rec *record) (pendingFile, error) {
	c, err := s.get()
	if err != nil {
		return nil, err
	}
	if err := c.MkdirAll(path.Dir(rec.InUse), 0o755); err != nil {
		s.drop(c)
		return nil, err
	}
	w, err := c.Create(rec.InUse)
	if err != nil {
		s.drop(c)
		return nil, err
	}
	return &hdfsFile{w: w}, nil
}

func (s *hdfsStore) trim(context.Context, *record) error { return nil }

func (s *hdfsStore) finish(_ context.Context, rec *record, _ *journal) error {
	if rec.InUse == rec.Target {
		return nil
	}
	c, err := s.get()
	if err != nil {
		return err
	}
	if _, err := c.Stat(rec.InUse); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := c.Rename(rec.InUse, rec.Target); err != nil {
		s.drop(c)
		return err
	}
	return nil
}

func (s *hdfsStore) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		err := s.client.Close()
		s.client = nil
		return err
	}
	return nil
}

type hdfsFile struct{ w *hdfs.FileWriter }

func (f *hdfsFile) Write(p []byte) (int, error) { return f.w.Write(p) }

// Sync is hflush: the datanodes have the data.
func (f *hdfsFile) Sync() error          { return f.w.Flush() }
func (f *hdfsFile) Truncate(int64) error { return errors.ErrUnsupported }
func (f *hdfsFile) Close() error {
	err := f.w.Close()
	for range 5 {
		if !hdfs.IsErrReplicating(err) {
			break
		}
		err = f.w.Close()
	}
	return err
}
