package wal

import "fmt"

// DamageKind says what recovery or a Reader found wrong in the log.
type DamageKind int

const (
	// TornTail: the last segment ended inside a record, as a crash during
	// a write leaves it, and Open cut those bytes off. They were never
	// synced, so no Append covering them had returned: nothing
	// acknowledged was in them.
	TornTail DamageKind = iota + 1
	// ShortSegment: the last segment was shorter than its header (a crash
	// while it was being created) and Open removed it; it held no record.
	ShortSegment
	// Region: damaged bytes inside a segment (a torn or corrupt record, a
	// zeroed block), skipped by the scanner; the records in them are lost.
	Region
	// Cut: a segment is shorter than it was when the segment after it was
	// created (its size is in that segment's header): its end was cut off
	// after it had been written and synced.
	Cut
	// Missing: a segment between two present ones does not exist.
	Missing
	// BadHeader: a segment's header is damaged; its records are read
	// anyway.
	BadHeader
)

func (k DamageKind) String() string {
	switch k {
	case TornTail:
		return "torn tail"
	case ShortSegment:
		return "segment shorter than its header"
	case Region:
		return "damaged region"
	case Cut:
		return "segment cut short"
	case Missing:
		return "segment missing"
	case BadHeader:
		return "damaged segment header"
	}
	return fmt.Sprintf("damage kind %d", int(k))
}

// Damage is one damaged place in the log. The log reports damage to its
// caller (Log.OpenDamage, Reader.Damage) and counts it in Stats, but logs
// it only at debug level: the caller knows what the damaged bytes held and
// says so once.
type Damage struct {
	Kind    DamageKind
	Segment uint64
	Offset  int64 // first damaged byte; 0 for a missing segment
	// Bytes is how many bytes are damaged, cut off or missing; -1 when
	// nobody recorded it (a missing segment whose successor's header does
	// not say how long it was).
	Bytes int64
	// OneRecord says a Region was exactly one record (its frame header is
	// intact and spans the region; its payload failed the checksum), so
	// the caller knows what it can have held.
	OneRecord bool
}

func (d Damage) String() string {
	name := segmentName(d.Segment)
	switch {
	case d.Kind == Missing && d.Bytes >= 0:
		return fmt.Sprintf("%s missing (%d bytes)", name, d.Bytes)
	case d.Kind == Missing:
		return name + " missing"
	case d.Kind == BadHeader:
		return name + ": damaged header"
	case d.Kind == Cut:
		return fmt.Sprintf("%s cut short at offset %d (%d bytes gone)", name, d.Offset, d.Bytes)
	}
	return fmt.Sprintf("%s: %s at offset %d (%d bytes)", name, d.Kind, d.Offset, d.Bytes)
}
