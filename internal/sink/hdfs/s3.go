package hdfssink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/sluicehq/sluice/internal/config"
)

// s3Config is what reaching a bucket takes, under Hadoop's S3A names.
type s3Config struct {
	endpoint  string
	secure    bool
	region    string
	pathStyle bool
	access    string
	secret    string
	token     string
	partSize  int64 // fs.s3a.multipart.size
	threshold int64 // fs.s3a.multipart.threshold
}

// readS3Config reads the fs.s3a.* settings: the sink's own properties
// first, then core-site.xml (per-bucket fs.s3a.bucket.<bucket>.* before
// fs.s3a.*), then, for credentials, the AWS_* environment and the AWS
// credential files (resolved by the client at each request).
func readS3Config(p *config.Props, hc map[string]string, bucket string) s3Config {
	get := func(key, def string) string {
		if v := strings.TrimSpace(p.String(key, "")); v != "" {
			return v
		}
		if bucket != "" {
			if v, ok := hc["fs.s3a.bucket."+bucket+"."+strings.TrimPrefix(key, "fs.s3a.")]; ok {
				return v
			}
		}
		if v, ok := hc[key]; ok {
			return v
		}
		return def
	}
	c := s3Config{
		endpoint: get("fs.s3a.endpoint", ""),
		region:   get("fs.s3a.endpoint.region", os.Getenv("AWS_REGION")),
		access:   get("fs.s3a.access.key", ""),
		secret:   get("fs.s3a.secret.key", ""),
		token:    get("fs.s3a.session.token", ""),
	}
	c.pathStyle = parseBool(p, "fs.s3a.path.style.access", get("fs.s3a.path.style.access", "false"))
	c.secure = parseBool(p, "fs.s3a.connection.ssl.enabled", get("fs.s3a.connection.ssl.enabled", "true"))
	c.partSize = parseSize(p, "fs.s3a.multipart.size", get("fs.s3a.multipart.size", "64M"))
	c.threshold = parseSize(p, "fs.s3a.multipart.threshold", get("fs.s3a.multipart.threshold", "128M"))
	if c.partSize < 5<<20 {
		p.Errorf("fs.s3a.multipart.size", "%d bytes is below S3's smallest part (5M)", c.partSize)
	}
	switch {
	case strings.HasPrefix(c.endpoint, "http://"):
		c.secure, c.endpoint = false, strings.TrimPrefix(c.endpoint, "http://")
	case strings.HasPrefix(c.endpoint, "https://"):
		c.secure, c.endpoint = true, strings.TrimPrefix(c.endpoint, "https://")
	}
	c.endpoint = strings.TrimSuffix(c.endpoint, "/")
	if c.endpoint == "" {
		c.endpoint = "s3.amazonaws.com"
		if c.region != "" {
			c.endpoint = "s3." + c.region + ".amazonaws.com"
		}
	}
	if (c.access == "") != (c.secret == "") {
		p.Errorf("fs.s3a.access.key", "set both fs.s3a.access.key and fs.s3a.secret.key, or neither (then AWS_* variables or ~/.aws/credentials are used)")
	}
	return c
}

func parseBool(p *config.Props, key, v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true":
		return true
	case "false":
		return false
	}
	p.Errorf(key, "%q is not a boolean; use true or false", v)
	return false
}

// parseSize reads a size as Hadoop does: a number with an optional K, M, G
// or T suffix (powers of 1024).
func parseSize(p *config.Props, key, v string) int64 {
	s := strings.ToUpper(strings.TrimSpace(v))
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		p.Errorf(key, "%q is not a size; write bytes or a number with K, M or G", v)
		return 64 << 20
	}
	return n * mult
}

// s3Store stages files locally and uploads each when it is closed: one
// PUT below fs.s3a.multipart.threshold, else a multipart upload of
// fs.s3a.multipart.size parts whose id and parts are recorded in the
// journal, so that a start after a crash resumes it.
type s3Store struct {
	core   *minio.Core
	bucket string
	cfg    s3Config
	name   string
}

func newS3Store(loc location, cfg s3Config) (*s3Store, error) {
	var creds *credentials.Credentials
	if cfg.access != "" {
		creds = credentials.NewStaticV4(cfg.access, cfg.secret, cfg.token)
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{},
			&credentials.IAM{},
		})
	}
	lookup := minio.BucketLookupAuto
	if cfg.pathStyle {
		lookup = minio.BucketLookupPath
	}
	core, err := minio.NewCore(cfg.endpoint, &minio.Options{Creds: creds, Secure: cfg.secure, Region: cfg.region, BucketLookup: lookup})
	if err != nil {
		return nil, fmt.Errorf("S3 endpoint %q: %w", cfg.endpoint, err)
	}
	scheme := "https"
	if !cfg.secure {
		scheme = "http"
	}
	u := url.URL{Scheme: scheme, Host: cfg.endpoint}
	return &s3Store{core: core, bucket: loc.host, cfg: cfg, name: loc.scheme + "://" + loc.host + " (" + u.String() + ")"}, nil
}

func (s *s3Store) String() string { return s.name }

func (s *s3Store) create(_ context.Context, rec *record) (pendingFile, error) {
	return createLocal(rec.InUse)
}

func (s *s3Store) trim(_ context.Context, rec *record) error {
	_, err := trimLocal(rec.InUse, rec.Format)
	return err
}

func (s *s3Store) close() error { return nil }

func (s *s3Store) finish(ctx context.Context, rec *record, j *journal) error {
	f, err := os.Open(rec.InUse)
	if errors.Is(err, fs.ErrNotExist) {
		// Uploaded before a crash (or nothing complete was staged).
		if rec.Upload != nil {
			return s.abortOthers(ctx, rec.Target, "")
		}
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
	size := st.Size()
	if size < s.cfg.threshold && rec.Upload == nil {
		if _, err := s.core.PutObject(ctx, s.bucket, rec.Target, io.NewSectionReader(f, 0, size), size, "", "", minio.PutObjectOptions{}); err != nil {
			return fmt.Errorf("upload s3a://%s/%s: %w", s.bucket, rec.Target, err)
		}
	} else if err := s.multipart(ctx, rec, j, f, size); err != nil {
		return err
	}
	_ = f.Close() // read only; closed before it is removed
	if err := os.Remove(rec.InUse); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (s *s3Store) multipart(ctx context.Context, rec *record, j *journal, f *os.File, size int64) error {
	key := rec.Target
	done := map[int]part{}
	if rec.Upload != nil && rec.Upload.ID != "" {
		// Resume: keep the recorded parts the server still has.
		res, err := s.core.ListObjectParts(ctx, s.bucket, key, rec.Upload.ID, 0, 10000)
		if err == nil {
			have := map[int]string{}
			for _, p := range res.ObjectParts {
				have[p.PartNumber] = strings.Trim(p.ETag, `"`)
			}
			for _, p := range rec.Upload.Parts {
				if have[p.Number] == strings.Trim(p.ETag, `"`) {
					done[p.Number] = p
				}
			}
			// Uploads of this key a crashed run started without
			// recording them go.
			if err := s.abortOthers(ctx, key, rec.Upload.ID); err != nil {
				return err
			}
		} else {
			rec.Upload.ID = "" // gone (completed or aborted): start again
		}
	}
	if rec.Upload == nil || rec.Upload.ID == "" {
		// Record the intent first: a crash after the server created the
		// upload but before its id was recorded still leads the next start
		// to abort it.
		if rec.Upload == nil {
			rec.Upload = &upload{PartSize: s.cfg.partSize}
			if err := j.put(rec); err != nil {
				return err
			}
		}
		if err := s.abortOthers(ctx, key, ""); err != nil {
			return err
		}
		id, err := s.core.NewMultipartUpload(ctx, s.bucket, key, minio.PutObjectOptions{})
		if err != nil {
			return fmt.Errorf("start multipart upload of s3a://%s/%s: %w", s.bucket, key, err)
		}
		rec.Upload.ID, rec.Upload.Parts = id, nil
		if err := j.put(rec); err != nil {
			return err
		}
	}
	ps := rec.Upload.PartSize
	var complete []minio.CompletePart
	for n, off := 1, int64(0); off < size; n, off = n+1, off+ps {
		l := min(ps, size-off)
		p, ok := done[n]
		if !ok || p.Size != l {
			op, err := s.core.PutObjectPart(ctx, s.bucket, key, rec.Upload.ID, n, io.NewSectionReader(f, off, l), l, minio.PutObjectPartOptions{})
			if err != nil {
				return fmt.Errorf("upload part %d of s3a://%s/%s: %w", n, s.bucket, key, err)
			}
			p = part{Number: n, ETag: op.ETag, Size: l}
			rec.Upload.Parts = append(rec.Upload.Parts, p)
			if err := j.put(rec); err != nil {
				return err
			}
		}
		complete = append(complete, minio.CompletePart{PartNumber: n, ETag: p.ETag})
	}
	if _, err := s.core.CompleteMultipartUpload(ctx, s.bucket, key, rec.Upload.ID, complete, minio.PutObjectOptions{}); err != nil {
		return fmt.Errorf("complete multipart upload of s3a://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// abortOthers aborts every multipart upload of key but keep.
func (s *s3Store) abortOthers(ctx context.Context, key, keep string) error {
	keyMarker, idMarker := "", ""
	for {
		res, err := s.core.ListMultipartUploads(ctx, s.bucket, key, keyMarker, idMarker, "", 1000)
		if err != nil {
			return fmt.Errorf("list multipart uploads of s3a://%s/%s: %w", s.bucket, key, err)
		}
		for _, u := range res.Uploads {
			if u.Key == key && u.UploadID != keep {
				if err := s.core.AbortMultipartUpload(ctx, s.bucket, key, u.UploadID); err != nil {
					return fmt.Errorf("abort multipart upload %s of s3a://%s/%s: %w", u.UploadID, s.bucket, key, err)
				}
			}
		}
		if !res.IsTruncated {
			return nil
		}
		keyMarker, idMarker = res.NextKeyMarker, res.NextUploadIDMarker
	}
}
