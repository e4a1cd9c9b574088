package hdfssink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/colinmarc/hdfs/v2"
	"github.com/colinmarc/hdfs/v2/hadoopconf"

	"github.com/sluicehq/sluice/internal/kerberos"
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

// hdfsStore writes files to HDFS with github.com/colinmarc/hdfs/v2. That
// client has no hflush: its Flush hands packets to the datanode pipeline
// without waiting for their acknowledgement, so a batch "flushed" with it
// could still be lost after its take committed. The sink therefore stages
// each file locally, fdatasync'ed per batch like S3, and on roll copies it
// to HDFS under its in-use name, closes it (Close waits for every
// datanode acknowledgement and completes the file with the namenode) and
// renames it to its target, as Flume renames on close. Readers see a file
// on HDFS only once it is rolled.
//
// With Kerberos the store holds the logged-in Kerberos client, whose
// renewal goroutine close ends; the HDFS client asks it for a ticket to
// the namenode's principal (dfs.namenode.kerberos.principal, _HOST being
// the namenode's host) on every connection.
type hdfsStore struct {
	opts hdfs.ClientOptions
	name string
	auth auth

	mu     sync.Mutex
	client *hdfs.Client
	kc     *kerberos.Client
}

func newHDFSStore(loc location, hc map[string]string, a auth) (*hdfsStore, error) {
	opts := hdfs.ClientOptionsFromConf(hadoopconf.HadoopConf(hc))
	secure := opts.KerberosClient != nil
	opts.KerberosClient = nil // set by login
	if secure && !a.kerberos {
		return nil, errors.New("core-site.xml (HADOOP_CONF_DIR) sets hadoop.security.authentication = kerberos; set hdfs.kerberosPrincipal and hdfs.kerberosKeytab to the agent's principal and keytab (sluice logs in from a keytab, not a ticket cache)")
	}
	if a.kerberos && opts.KerberosServicePrincipleName == "" {
		return nil, errors.New("kerberos needs the namenode's principal: set dfs.namenode.kerberos.principal (such as nn/_HOST@EXAMPLE.COM) in hdfs-site.xml under HADOOP_CONF_DIR")
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
	if a.proxyUser != "" {
		// Simple authentication: the namenode takes the user the client
		// names (as it takes HADOOP_USER_NAME).
		opts.User = a.proxyUser
	} else if u := os.Getenv("HADOOP_USER_NAME"); u != "" {
		opts.User = u
	} else if u := os.Getenv("USER"); u != "" {
		opts.User = u
	} else {
		opts.User = "sluice"
	}
	return &hdfsStore{opts: opts, auth: a, name: "hdfs://" + strings.Join(opts.Addresses, ",")}, nil
}

func (s *hdfsStore) String() string { return s.name }

func (s *hdfsStore) get() (*hdfs.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		if err := s.loginLocked(); err != nil {
			return nil, fmt.Errorf("connect to %s: %w", s.name, err)
		}
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
		_ = c.Close() // dropped because it failed
	}
	s.mu.Unlock()
}

func (s *hdfsStore) create(_ context.Context, rec *record) (pendingFile, error) {
	return createLocal(rec.InUse)
}

func (s *hdfsStore) trim(_ context.Context, rec *record) error {
	_, err := trimLocal(rec.InUse, rec.Format)
	return err
}

// finish copies the staged file to HDFS as <dir>/<inUse name>, closes it
// and renames it to the target. After a crash it may find the copy done
// (the target exists with the staged file's size) or half done (the
// in-use file exists: it is written again).
func (s *hdfsStore) finish(_ context.Context, rec *record, _ *journal) error {
	f, err := os.Open(rec.InUse)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	c, err := s.get()
	if err != nil {
		return err
	}
	if fi, err := c.Stat(rec.Target); err == nil {
		if fi.Size() != st.Size() {
			return fmt.Errorf("cannot finish %s: it exists with %d bytes, the staged file has %d", rec.Target, fi.Size(), st.Size())
		}
	} else {
		if err := s.copy(c, f, rec); err != nil {
			s.drop(c)
			return err
		}
	}
	_ = f.Close() // read only; closed before it is removed
	return os.Remove(rec.InUse)
}

func (s *hdfsStore) copy(c *hdfs.Client, f *os.File, rec *record) error {
	inUse := rec.HDFSInUse
	if err := c.MkdirAll(path.Dir(inUse), 0o755); err != nil {
		return err
	}
	if err := c.Remove(inUse); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	w, err := c.Create(inUse)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, f); err != nil {
		_ = w.Close() // the copy failed; the in-use file is written again
		return fmt.Errorf("write %s: %w", inUse, err)
	}
	err = w.Close()
	for range 10 {
		if !hdfs.IsErrReplicating(err) {
			break
		}
		time.Sleep(100 * time.Millisecond)
		err = w.Close()
	}
	if err != nil {
		return fmt.Errorf("close %s: %w", inUse, err)
	}
	if inUse != rec.Target {
		if err := c.Rename(inUse, rec.Target); err != nil {
			return fmt.Errorf("rename %s: %w", inUse, err)
		}
	}
	return nil
}

func (s *hdfsStore) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.client != nil {
		err = s.client.Close()
		s.client = nil
	}
	if s.kc != nil {
		s.kc.Destroy()
		s.kc = nil
		s.opts.KerberosClient = nil
	}
	return err
}
