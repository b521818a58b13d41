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
