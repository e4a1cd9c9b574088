package eventexpr

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func TestScanValid(t *testing.T) {
	for _, s := range []string{
		`{}`, `[]`, `0`, `-0`, `-0.5e+10`, `1E5`, `"a"`, `""`, `true`, `false`, `null`, ` { "a" : [ 1 , 2 ] , "b" : { } } `,
		`{"a":"\u00e9\n\"\\\/\b\f\r\t"}`, `[[[[]]]]`, "\t\r\n[1]\n", `{"a":1,"a":2}`, `"é日本"`, "\"\xff\"",
	} {
		var sc jsonScan
		if r := sc.scan(s, 1000); r != scanValid {
			t.Errorf("scan(%q) = %v, want valid", s, r)
		}
	}
	for _, s := range []string{
		``, ` `, `{`, `}`, `[1,]`, `{"a":1,}`, `{"a"}`, `{a:1}`, `01`, `1.`, `.5`, `1e`, `+1`, `-`, `--1`, `tru`, `nul`, `falsey`,
		`"a`, "\"\x01\"", `"\x"`, `"\u12g4"`, `"\u12"`, `[1 2]`, `{"a":1 "b":2}`, `1 2`, `[}`, `{]`, `{"a":1]`, `NaN`, `'a'`,
		"[1]\x00", `{"a":1}}`, `[[]`,
	} {
		var sc jsonScan
		if r := sc.scan(s, 1000); r != scanInvalid {
			t.Errorf("scan(%q) = %v, want invalid", s, r)
		}
	}
}

func TestScanMembers(t *testing.T) {
	var sc jsonScan
	s := ` {"a" : "x", "b\"":1.5,"c":{"d":[1,{"e":2}]},"f":"\n", "g":null ,"h":true,"i":[]} `
	if r := sc.scan(s, 1000); r != scanValid {
		t.Fatal(r)
	}
	var got []string
	for _, m := range sc.members {
		got = append(got, m.key(s)+"="+m.val(s)+"/"+string(m.kind))
	}
	want := `a="x"/"|b\"=1.5/1|c={"d":[1,{"e":2}]}/{|f="\n"/\|g=null/n|h=true/t|i=[]/[`
	if strings.Join(got, "|") != want {
		t.Errorf("members\n got %s\nwant %s", strings.Join(got, "|"), want)
	}
	if !sc.rootObject || !sc.members[1].keyEscaped || sc.members[0].keyEscaped {
		t.Errorf("rootObject %v, escaped keys %v %v", sc.rootObject, sc.members[0].keyEscaped, sc.members[1].keyEscaped)
	}
	if sc.scan(`[{"a":1}]`, 1000) != scanValid || sc.rootObject || len(sc.members) != 0 {
		t.Errorf("an array's objects are not the root's: %v %v", sc.rootObject, sc.members)
	}
}

func TestScanLimits(t *testing.T) {
	var sc jsonScan
	// fastjson refuses a value at the 301st level: a scalar in 300
	// containers, or a 301st container.
	ok := strings.Repeat("[", MaxJSONDepth-1) + "1" + strings.Repeat("]", MaxJSONDepth-1)
	deep := strings.Repeat("[", MaxJSONDepth) + "1" + strings.Repeat("]", MaxJSONDepth)
	empty := strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth)
	tooDeepEmpty := strings.Repeat("[", MaxJSONDepth+1) + strings.Repeat("]", MaxJSONDepth+1)
	for _, c := range []struct {
		s    string
		want scanResult
	}{{ok, scanValid}, {deep, scanTooDeep}, {empty, scanValid}, {tooDeepEmpty, scanTooDeep}} {
		if r := sc.scan(c.s, 1000); r != c.want {
			t.Errorf("%d levels: %v, want %v", strings.Count(c.s, "["), r, c.want)
		}
		var p fastjson.Parser
		if _, err := p.Parse(c.s); (err == nil) != (c.want == scanValid) {
			t.Errorf("%d levels: fastjson says %v", strings.Count(c.s, "["), err)
		}
	}
	if r := sc.scan(`[1,2,3]`, 4); r != scanValid {
		t.Errorf("4 values in a budget of 4: %v", r)
	}
	if r := sc.scan(`[1,2,3,4]`, 4); r != scanTooLarge {
		t.Errorf("5 values in a budget of 4: %v", r)
	}
	if r := sc.scan(`{"a":"b","c":"d"}`, 3); r != scanValid {
		t.Errorf("keys are not values: %v", r)
	}
}

// FuzzScan holds the scan to encoding/json's idea of valid JSON, and to
// fastjson parsing whatever it lets through, with the members it notes
// being the object's.
func FuzzScan(f *testing.F) {
	for _, s := range []string{`{"ts":"2024-03-05T23:59:07.123+0000","level":"INFO","ms":12}`, `[1,{"a":[true,false,null]}]`,
		`{"a\u0041":"\ud83d\ude00"}`, `-1.5e-3`, `{"a":{}}`, `"\"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var sc jsonScan
		r := sc.scan(s, 1<<20)
		if r == scanTooDeep {
			return
		}
		if (r == scanValid) != json.Valid([]byte(s)) {
			t.Fatalf("scan(%q) = %v, encoding/json.Valid = %v", s, r, json.Valid([]byte(s)))
		}
		if r != scanValid {
			return
		}
		var p fastjson.Parser
		v, err := p.Parse(s)
		if err != nil {
			t.Fatalf("scan let %q through, fastjson: %v", s, err)
		}
		o, err := v.Object()
		if err != nil {
			if sc.rootObject {
				t.Fatalf("%q: rootObject, fastjson says %v", s, err)
			}
			return
		}
		if !sc.rootObject || o.Len() != len(sc.members) {
			t.Fatalf("%q: %d members, fastjson %d", s, len(sc.members), o.Len())
		}
		i := 0
		o.Visit(func(k []byte, v *fastjson.Value) {
			m := sc.members[i]
			if !m.keyEscaped && m.key(s) != string(k) {
				t.Errorf("%q: member %d key %q, fastjson %q", s, i, m.key(s), k)
			}
			var a, b any
			if json.Unmarshal([]byte(m.val(s)), &a) != nil || json.Unmarshal(v.MarshalTo(nil), &b) != nil || !jsonEqual(a, b) {
				t.Errorf("%q: member %d value %q, fastjson %s", s, i, m.val(s), v.MarshalTo(nil))
			}
			i++
		})
	})
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// BenchmarkScan is the check json() makes of a body, against what it did
// before (fastjson's parse, then its strict validation).
func BenchmarkScan(b *testing.B) {
	const body = `{"ts":"2024-03-05T23:59:07.123+0000","level":"INFO","app":"checkout","user":"u123","msg":"request handled","ms":123,"path":"/api/v1/orders"}`
	b.Run("scan", func(b *testing.B) {
		var sc jsonScan
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if sc.scan(body, 1000) != scanValid {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("fastjson", func(b *testing.B) {
		var p fastjson.Parser
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := p.Parse(body); err != nil {
				b.Fatal(err)
			}
			if err := fastjson.Validate(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzMember holds a member read from the scan to what the tree gives for
// the same key.
func FuzzMember(f *testing.F) {
	f.Add(`{"ts":"2024-03-05","n":-1.5e3,"i":12,"b":true,"z":null,"o":{"x":1},"e":"a\nb"}`, "ts")
	f.Add(`{"a":1,"a":2}`, "a")
	f.Add(`{"a\u0062":1,"ab":2}`, "ab")
	f.Add(`{"big":123456789012345678901234567890}`, "big")
	f.Add(`{}`, "x")
	f.Fuzz(func(t *testing.T, s, key string) {
		d := jsonDoc{src: s}
		if d.scan.scan(s, 1<<20) != scanValid {
			return
		}
		got, ok := d.member(key)
		if !ok {
			return
		}
		root, err := d.tree()
		if err != nil {
			t.Fatal(err)
		}
		o, err := root.Object()
		if err != nil {
			t.Fatalf("%q: the scan answered for a root that is not an object", s)
		}
		var want any
		switch v := o.Get(key); {
		case v == nil || v.Type() == fastjson.TypeNull:
		case v.Type() == fastjson.TypeString:
			b, _ := v.StringBytes()
			want = string(b)
		case v.Type() == fastjson.TypeNumber:
			want, _ = jsonNumber(v)
		case v.Type() == fastjson.TypeTrue:
			want = true
		case v.Type() == fastjson.TypeFalse:
			want = false
		default:
			t.Fatalf("%q: the scan answered %q for a %s", s, key, v.Type())
		}
		var g any
		switch got.k {
		case dStr:
			g = got.s
		case dAny:
			g = got.a
		}
		if g != want {
			t.Fatalf("%q[%q]: scan %#v, tree %#v", s, key, g, want)
		}
	})
}
