// Package interceptor holds Flume's interceptors: timestamp, host, static,
// remove_header, UUID, regex_filter, regex_extractor and search_replace;
// and sluice's transform, which runs expressions (see eventexpr) in place
// of the custom Java interceptors Flume users write.
// Each reads Flume's property names and defaults, and works on a batch in
// place: header-setting interceptors change the events they are given, and
// regex_filter keeps the events it passes at the front of the same slice.
//
// Interceptors are safe for concurrent use (a source may process batches
// from several connections at once): they hold no state that Intercept
// changes, except counters.
//
// Flume compiles its patterns with java.util.regex; sluice uses Go's RE2.
// Most patterns mean the same in both. The constructs RE2 does not have
// (lookahead, lookbehind, backreferences, atomic groups, possessive
// quantifiers, Java-only escapes and classes) are reported as configuration
// problems that name the property, rather than silently matching something
// else. Small differences remain in patterns that compile in both: Java's
// "." also excludes \r, \u0085, \u2028 and \u2029 (RE2's only \n), Java's
// "$" also matches before a final line terminator (RE2's only at the end;
// use \n?$ or (?m)), and Java's \s includes \x0B. In search_replace, RE2
// skips an empty match that directly follows a match, where Java replaces
// it too ("x*" on "axc" gives "-a-c-", Java "-a--c-").
package interceptor

import (
	"regexp"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/internal/javaregex"
)

// Types maps every interceptor type a Flume configuration can name to its
// constructor: the lower-case Flume aliases (from Flume's InterceptorType
// enum) and the builder class names, spelled exactly as in Flume. The UUID
// interceptor has no alias in Flume, only its class name.
var Types = map[string]flow.InterceptorFactory{
	"timestamp":       NewTimestamp,
	"host":            NewHost,
	"static":          NewStatic,
	"remove_header":   NewRemoveHeader,
	"regex_filter":    NewRegexFilter,
	"regex_extractor": NewRegexExtractor,
	"search_replace":  NewSearchReplace,
	"transform":       NewTransform, // sluice's own: expressions (docs/transforms.md)

	"org.apache.flume.interceptor.TimestampInterceptor$Builder":        NewTimestamp,
	"org.apache.flume.interceptor.HostInterceptor$Builder":             NewHost,
	"org.apache.flume.interceptor.StaticInterceptor$Builder":           NewStatic,
	"org.apache.flume.interceptor.RemoveHeaderInterceptor$Builder":     NewRemoveHeader,
	"org.apache.flume.interceptor.RegexFilteringInterceptor$Builder":   NewRegexFilter,
	"org.apache.flume.interceptor.RegexExtractorInterceptor$Builder":   NewRegexExtractor,
	"org.apache.flume.interceptor.SearchAndReplaceInterceptor$Builder": NewSearchReplace,
	"org.apache.flume.sink.solr.morphline.UUIDInterceptor$Builder":     NewUUID,
}

// neverMatch stands in for a pattern that did not compile, so that an
// interceptor built from a configuration with problems is still safe to
// call; the agent refuses to run such a configuration anyway.
var neverMatch = regexp.MustCompile(`[^\x00-\x{10FFFF}]`)

// compileRegex compiles the Java pattern expr read from key. When RE2 cannot
// compile it, it records a problem on key that says why (naming the Java
// construct RE2 lacks, when that is the reason) and returns neverMatch.
func compileRegex(p *config.Props, key, expr string) *regexp.Regexp {
	re, err := regexp.Compile(expr)
	if err == nil {
		return re
	}
	if what := javaregex.Unsupported(err); what != "" {
		p.Errorf(key, "%q uses %s, which Go's RE2 regular expressions do not support; rewrite the pattern without it (%v)", expr, what, err)
	} else {
		p.Errorf(key, "%q is not a valid regular expression: %v", expr, err)
	}
	return neverMatch
}

// requiredRaw returns key's value as written (not trimmed, as Flume reads
// patterns), recording a problem when it is missing or empty.
func requiredRaw(p *config.Props, key, hint string) string {
	v := p.String(key, "")
	if v == "" {
		p.Errorf(key, "missing required property; set %s to %s", p.Full(key), hint)
	}
	return v
}
