package eventexpr

import (
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// Keys every component with expressions reads, besides its expressions.
const (
	KeyBudget    = "budget"
	KeyJSONBytes = "jsonMaxBytes"
	KeyTimeZone  = "timeZone"
)

// CompilerFromProps returns a compiler with the limits and time zone set in
// p (budget, jsonMaxBytes, timeZone), recording a problem for a bad one.
func CompilerFromProps(p *config.Props) *Compiler {
	l := DefaultLimits
	l.Budget = uint(p.IntRange(KeyBudget, int(l.Budget), 1000, 1<<30))
	l.JSONBytes = p.IntRange(KeyJSONBytes, l.JSONBytes, 1, 1<<30)
	var loc *time.Location
	if tz := strings.TrimSpace(p.String(KeyTimeZone, "")); tz != "" {
		var err error
		if loc, err = time.LoadLocation(tz); err != nil {
			p.Errorf(KeyTimeZone, "%q is not a time zone: %v (use an IANA name such as Europe/Paris, or UTC)", tz, err)
			loc = nil
		}
	}
	return NewCompiler(l, loc)
}

// CompileKey compiles the expression set at key, recording a problem (with
// the column inside the expression) when it does not compile; it returns
// nil then, or when key is not set.
func (c *Compiler) CompileKey(p *config.Props, key string, want Want) *Program {
	if !p.Has(key) {
		return nil
	}
	src := p.String(key, "")
	prog, err := c.Compile(src, want)
	if err != nil {
		p.Errorf(key, "%v", err)
		return nil
	}
	return prog
}
