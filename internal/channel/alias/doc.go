// Package aliaschannel runs Flume channel types that sluice has no engine of its
// own for on the channels it has, translating their keys, so that a Flume
// config using them starts and keeps at least what it promised. Each says
// at start (a note, also listed by sluice validate) what runs instead.
package aliaschannel
