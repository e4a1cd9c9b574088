package flow

import (
	"context"
	"fmt"
)

// fullError is an error with its own text that still matches ErrChannelFull
// under errors.Is, so a channel can say which limit was reached.
type fullError struct{ msg string }

func (e *fullError) Error() string { return e.msg }
func (e *fullError) Unwrap() error { return ErrChannelFull }

// FullErrorf returns an error with the formatted text that wraps
// ErrChannelFull, for channels to say which limit was reached ("channel c1 is
// full: capacity 1000 reached ...") without repeating "channel full".
func FullErrorf(format string, args ...any) error {
	return &fullError{msg: fmt.Sprintf(format, args...)}
}

// FullWaitEnded returns the error of a put commit whose wait for space was
// ended by ctx (the source is stopping): the formatted text says which
// channel and limit, and the error matches ErrChannelFull and ctx's error
// (context.Canceled or context.DeadlineExceeded) under errors.Is.
func FullWaitEnded(ctx context.Context, format string, args ...any) error {
	return fmt.Errorf("%w: %w", FullErrorf(format, args...), ctx.Err())
}
