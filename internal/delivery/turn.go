package delivery

import "context"

// Turn waits until the destination lets one more request go, and counts
// it as sent: a read of the destination made beside the export (syncer
// verify's lookups in a daemon) takes its requests from the same rate
// limit, quota and pauses as the batches, so the two together stay within
// what the third party allows. It does not take an in-flight slot (the
// read is one request at a time) and says nothing to the breaker: the
// reader's own answers are not the export's.
//
// It returns the hold's, refusal's or pause's error when the destination
// sends nothing now, as Deliver would.
func (d *Deliverer) Turn(ctx context.Context) error {
	d.loadShared(ctx)
	if err := d.checkHold(); err != nil {
		return err
	}
	if err := d.checkRefusals(); err != nil {
		return err
	}
	if err := d.waitPause(ctx); err != nil {
		return err
	}
	if err := d.pacer.wait(ctx); err != nil {
		return err
	}
	d.pacer.sent()
	return nil
}
