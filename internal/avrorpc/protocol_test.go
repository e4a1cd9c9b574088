package avrorpc

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestProtocolJSON rebuilds the protocol JSON from Flume's own flume.avdl
// (testdata, copied from apache/flume flume-ng-sdk/src/main/avro) the way
// Avro's IDL compiler does before 1.11.1 (doc = the license comment without
// "/**" and "*/", trimmed) and checks it against ProtocolJSON and the hash
// Flume 1.9 to 1.11.0 agents send.
func TestProtocolJSON(t *testing.T) {
	src, err := os.ReadFile("testdata/flume.avdl")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	i, j := strings.Index(s, "/**"), strings.Index(s, "*/")
	doc := strings.TrimSpace(s[i+3 : j])

	type field struct {
		Name string `json:"name"`
		Type any    `json:"type"`
	}
	type msg struct {
		Request  []field `json:"request"`
		Response string  `json:"response"`
	}
	proto := struct {
		Protocol  string `json:"protocol"`
		Namespace string `json:"namespace"`
		Doc       string `json:"doc"`
		Types     []any  `json:"types"`
		Messages  struct {
			Append      msg `json:"append"`
			AppendBatch msg `json:"appendBatch"`
		} `json:"messages"`
	}{
		Protocol:  "AvroSourceProtocol",
		Namespace: "org.apache.flume.source.avro",
		Doc:       doc,
		Types: []any{
			struct {
				Type    string   `json:"type"`
				Name    string   `json:"name"`
				Symbols []string `json:"symbols"`
			}{"enum", "Status", []string{"OK", "FAILED", "UNKNOWN"}},
			struct {
				Type   string  `json:"type"`
				Name   string  `json:"name"`
				Fields []field `json:"fields"`
			}{"record", "AvroFlumeEvent", []field{
				{"headers", map[string]string{"type": "map", "values": "string"}},
				{"body", "bytes"},
			}},
		},
	}
	proto.Messages.Append = msg{[]field{{"event", "AvroFlumeEvent"}}, "Status"}
	proto.Messages.AppendBatch = msg{[]field{{"events", struct {
		Type  string `json:"type"`
		Items string `json:"items"`
	}{"array", "AvroFlumeEvent"}}}, "Status"}

	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(proto); err != nil {
		t.Fatal(err)
	}
	got := strings.TrimSuffix(b.String(), "\n")
	if got != ProtocolJSON {
		t.Fatalf("protocol JSON from flume.avdl differs from ProtocolJSON:\n%s\n%s", got, ProtocolJSON)
	}
	if len(ProtocolJSON) != 1334 {
		t.Errorf("len(ProtocolJSON) = %d, want 1334", len(ProtocolJSON))
	}
	sum := md5.Sum([]byte(got))
	if h := hex.EncodeToString(sum[:]); h != "86aadae2c45474c0fe93ffd0f2350a65" {
		t.Errorf("MD5 = %s, want 86aadae2c45474c0fe93ffd0f2350a65", h)
	}
	if ProtocolHash.String() != "86aadae2c45474c0fe93ffd0f2350a65" {
		t.Errorf("ProtocolHash = %s", ProtocolHash)
	}
}

func TestCheckRemoteProtocol(t *testing.T) {
	noDoc := strings.Replace(ProtocolJSON, `"doc":"`+licenseDoc+`",`, "", 1)
	if noDoc == ProtocolJSON {
		t.Fatal("doc not removed")
	}
	if got := hex.EncodeToString(func() []byte { s := md5.Sum([]byte(noDoc)); return s[:] }()); got != "30da54059df72d9584b867d5202e2069" {
		t.Errorf("MD5 of the protocol without doc = %s, want 30da54059df72d9584b867d5202e2069", got)
	}
	tests := []struct {
		name, text string
		ok         bool
	}{
		{"flume", ProtocolJSON, true},
		{"no doc", noDoc, true},
		{"body is a string", strings.Replace(noDoc, `{"name":"body","type":"bytes"}`, `{"name":"body","type":"string"}`, 1), false},
		{"other messages", `{"protocol":"P","messages":{"hello":{"request":[],"response":"null"}}}`, false},
		{"not json", `{"protocol":`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkRemoteProtocol(tt.text)
			if (err == nil) != tt.ok {
				t.Fatalf("checkRemoteProtocol: %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
