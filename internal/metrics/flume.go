package metrics

import "encoding/json"

// FlumeJSON returns the registry's sets as Flume's HTTP monitoring shows
// them: one object keyed "<Kind>.<name>" ("SOURCE.r1", "CHANNEL.c1",
// "SINK.k1"), each mapping every attribute to a string as Java's toString
// prints it, plus "Type" (the kind), "StartTime" and "StopTime" (Unix ms,
// "0" while running). Keys are sorted, so the output is deterministic.
// Secrets are masked (Redact).
func (r *Registry) FlumeJSON() []byte {
	all := map[string]map[string]string{}
	for _, s := range r.Sets() {
		m := map[string]string{}
		s.Each(func(name, value string) { m[name] = r.Redact.String(value) })
		m["Type"] = string(s.Kind)
		all[r.Redact.String(string(s.Kind)+"."+s.Name)] = m
	}
	b, err := json.Marshal(all)
	if err != nil { // maps of strings always marshal
		panic("BUG: metrics: marshal Flume JSON: " + err.Error())
	}
	return b
}
