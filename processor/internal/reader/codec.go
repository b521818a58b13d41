package reader

import (
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// CodecConfig returns the serde settings of endpoint e of topology f, with
// schema paths resolved against the topology file's directory. Sinks and
// stages build their codecs with serde.NewCodec(CodecConfig(f, e)); both
// use this one, so that a registry setting reaches every reader.
func CodecConfig(f *topology.File, e topology.Endpoint) serde.Config {
	return serde.Config{
		Format:     e.Format,
		SchemaFile: f.Resolve(e.Schema),
		Topic:      e.Topic,
		Registry: serde.Registry{
			URL:                e.Registry.URL,
			Subject:            e.Registry.Subject,
			ReaderSchema:       f.Resolve(e.Registry.ReaderSchema),
			Username:           e.Registry.Username,
			Password:           string(e.Registry.Password),
			PasswordFile:       f.Resolve(e.Registry.PasswordFile),
			CAFile:             f.Resolve(e.Registry.CAFile),
			InsecureSkipVerify: e.Registry.InsecureSkipVerify,
		},
	}
}
