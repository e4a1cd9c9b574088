package avrorpc

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/hamba/avro/v2"
)

// licenseDoc is the protocol doc that Avro's IDL compiler (1.7.4 to 1.11.0,
// so Flume 1.9 to 1.11.0) takes from the ASF license comment that opens
// flume.avdl: the comment without "/**" and "*/", trimmed, JSON-escaped.
const licenseDoc = `* Licensed to the Apache Software Foundation (ASF) under one\n` +
	` * or more contributor license agreements.  See the NOTICE file\n` +
	` * distributed with this work for additional information\n` +
	` * regarding copyright ownership.  The ASF licenses this file\n` +
	` * to you under the Apache License, Version 2.0 (the\n` +
	` * \"License\"); you may not use this file except in compliance\n` +
	` * with the License.  You may obtain a copy of the License at\n` +
	` *\n` +
	` * http://www.apache.org/licenses/LICENSE-2.0\n` +
	` *\n` +
	` * Unless required by applicable law or agreed to in writing,\n` +
	` * software distributed under the License is distributed on an\n` +
	` * \"AS IS\" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY\n` +
	` * KIND, either express or implied.  See the License for the\n` +
	` * specific language governing permissions and limitations\n` +
	` * under the License.`

// ProtocolJSON is Flume's AvroSourceProtocol exactly as Java's
// Protocol.toString() prints it for Flume 1.9 to 1.11.0. Its MD5 is the
// hash both ends exchange in the Avro IPC handshake.
const ProtocolJSON = `{"protocol":"AvroSourceProtocol","namespace":"org.apache.flume.source.avro",` +
	`"doc":"` + licenseDoc + `",` +
	`"types":[{"type":"enum","name":"Status","symbols":["OK","FAILED","UNKNOWN"]},` +
	`{"type":"record","name":"AvroFlumeEvent","fields":[{"name":"headers","type":{"type":"map","values":"string"}},{"name":"body","type":"bytes"}]}],` +
	`"messages":{"append":{"request":[{"name":"event","type":"AvroFlumeEvent"}],"response":"Status"},` +
	`"appendBatch":{"request":[{"name":"events","type":{"type":"array","items":"AvroFlumeEvent"}}],"response":"Status"}}}`

// MD5 is a protocol hash as the handshake carries it.
type MD5 [16]byte

func (h MD5) String() string { return hex.EncodeToString(h[:]) }

// ProtocolHash is the MD5 of ProtocolJSON, 86aadae2c45474c0fe93ffd0f2350a65.
var ProtocolHash = MD5(md5.Sum([]byte(ProtocolJSON)))

// knownHashes are the hashes of texts of Flume's protocol that differ only
// in their doc, so they need no protocol text to be accepted: trunk Flume
// built with Avro 1.11.1+ (which strips the "* " of doc comments), and
// clients that declare the protocol without a doc.
var knownHashes = map[MD5]bool{
	ProtocolHash: true,
	mustHash("8076c53714e01f6e2c1deb9544e7b1fe"): true,
	mustHash("30da54059df72d9584b867d5202e2069"): true,
}

func mustHash(s string) MD5 {
	var h MD5
	if n, err := hex.Decode(h[:], []byte(s)); err != nil || n != 16 {
		panic("BUG: bad hash literal " + s)
	}
	return h
}

// Status is the reply to append and appendBatch.
type Status int

const (
	OK Status = iota
	Failed
	Unknown
)

func (s Status) String() string {
	switch s {
	case OK:
		return "OK"
	case Failed:
		return "FAILED"
	case Unknown:
		return "UNKNOWN"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Message names of the protocol.
const (
	msgAppend      = "append"
	msgAppendBatch = "appendBatch"
)

// flumeProto is parsed at the first handshake, not when the agent starts.
var flumeProto = sync.OnceValue(func() *avro.Protocol { return mustParseProtocol(ProtocolJSON) })

func mustParseProtocol(s string) *avro.Protocol {
	p, err := avro.ParseProtocol(s)
	if err != nil {
		panic("BUG: Flume protocol does not parse: " + err.Error())
	}
	return p
}

// maxProtocolText bounds the protocol text a peer may send; Flume's is
// 1334 bytes.
const maxProtocolText = 64 << 10

// shape prints what of schema s decides its binary encoding, with named
// types expanded and names left out.
func shape(s avro.Schema, depth int) string {
	if depth > 16 {
		return "..."
	}
	depth++
	switch v := s.(type) {
	case *avro.RefSchema:
		return shape(v.Schema(), depth)
	case *avro.RecordSchema:
		b := "record{"
		for _, f := range v.Fields() {
			b += shape(f.Type(), depth) + ";"
		}
		return b + "}"
	case *avro.ArraySchema:
		return "array<" + shape(v.Items(), depth) + ">"
	case *avro.MapSchema:
		return "map<" + shape(v.Values(), depth) + ">"
	case *avro.EnumSchema:
		return fmt.Sprintf("enum%q", v.Symbols())
	case *avro.UnionSchema:
		b := "union["
		for _, t := range v.Types() {
			b += shape(t, depth) + ","
		}
		return b + "]"
	}
	return s.String()
}

// checkRemoteProtocol parses a protocol a peer sent in a handshake and
// reports whether it is wire-compatible with Flume's: the messages it
// declares that Flume has take and return the same types (schemas compared
// in Avro's parsing canonical form, so docs and properties do not matter).
func checkRemoteProtocol(text string) error {
	if len(text) > maxProtocolText {
		return fmt.Errorf("protocol text of %d bytes exceeds %d", len(text), maxProtocolText)
	}
	p, err := avro.ParseProtocol(text)
	if err != nil {
		return fmt.Errorf("parse protocol: %w", err)
	}
	found := 0
	for _, name := range []string{msgAppend, msgAppendBatch} {
		m := p.Message(name)
		if m == nil {
			continue
		}
		found++
		want := flumeProto().Message(name)
		if got, w := shape(m.Request(), 0), shape(want.Request(), 0); got != w {
			return fmt.Errorf("message %s takes %s, want %s", name, got, w)
		}
		if got, w := shape(m.Response(), 0), shape(want.Response(), 0); got != w {
			return fmt.Errorf("message %s returns %s, want %s", name, got, w)
		}
	}
	if found == 0 {
		return fmt.Errorf("protocol %s declares neither append nor appendBatch", p.FullName())
	}
	return nil
}
