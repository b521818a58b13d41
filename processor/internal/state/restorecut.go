package state

// Cut commits what the restore applied, with the checkpoint of where it
// stopped, and leaves the partition unusable: the restore found records
// deleted before it read them (GapError), and the checkpoint lets the
// next restore see that loss (Checkpoint.Check) rather than rebuild as if
// nothing was lost.
func (r *restorer) Cut() error {
	r.b.setCheckpoint(r.set.stores[0], r.p, r.part.checkpoint())
	if err := r.b.Commit(); err != nil {
		return err
	}
	r.b = r.b.again()
	return nil
}
