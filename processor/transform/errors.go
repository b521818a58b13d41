package transform

import "errors"

// ErrEmptyKey is the error of a Store call with an empty key: the
// changelog of a store holds no such key. It is the record's fault, like
// any error a function returns.
var ErrEmptyKey = errors.New("state key is empty")

// ErrStoreClosed is the error of a Store used after the call of the
// stateful transform it was passed to returned (or was abandoned at its
// deadline).
var ErrStoreClosed = errors.New("state store used after its call returned")

// ErrNoStore is the error of a stateful step applied without a store: the
// engine passes one with each record (see WithStore), a Pipeline applied
// on its own has none.
var ErrNoStore = errors.New("no state store for the stateful step")

// ErrNoMatch is the error of a join step with missing: dead_letter whose
// key the table does not hold as of the record's timestamp.
var ErrNoMatch = errors.New("the table holds no value for the key at the record's time")

// ErrNoTable is the error of a join step applied without a table: the
// engine passes one with each record (see WithTable), a Pipeline applied
// on its own has none.
var ErrNoTable = errors.New("no table for the join step")
