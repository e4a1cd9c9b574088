package thriftrpc

// Package flume is generated from flume.thrift by Debian's thrift-compiler
// (0.17.0, which scripts/test.sh installs), then gofmt'ed;
// TestGeneratedCodeIsCurrent checks the committed code matches.
//
//go:generate thrift --gen go:package_prefix=github.com/sluicehq/sluice/internal/thriftrpc/,skip_remote -out . flume.thrift
//go:generate gofmt -w flume
