package sourcetest

import (
	"context"

	"github.com/sluicehq/sluice/internal/event"
	"github.com/sluicehq/sluice/internal/flow"
)

// newProcessor returns a processor that puts every batch into ch in one
// transaction, as the ChannelProcessor does for one required channel.
func newProcessor(ch flow.Channel) flow.Processor { return directProcessor{ch} }

type directProcessor struct{ ch flow.Channel }

func (d directProcessor) Process(_ context.Context, events []event.Event) error {
	tx := d.ch.Begin()
	if err := tx.Put(events); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		tx.Rollback()
		return err
	}
	return nil
}
