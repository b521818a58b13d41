package topology

import (
	"net/url"
	"slices"
	"strings"
)

var mechanisms = []string{MechanismPlain, MechanismScramSHA256, MechanismScramSHA512}

// warn records a warning at path: the file works, but should change.
func (v *validator) warn(path, format string, args ...any) {
	d := v.d
	saved := d.errs
	d.errs = nil
	d.add(v.at(path), path, format, args...)
	v.f.warnings = append(v.f.warnings, d.errs...)
	d.errs = saved
}

// literal reports whether the value at path was written in the file
// itself rather than taken from the environment.
func (v *validator) literal(path string) bool {
	_, refs := v.d.src[path]
	return v.has(path) && !refs
}

func (v *validator) kafkaTLS() {
	t, p := v.f.Kafka.TLS, "kafka.tls"
	if !v.has(p) {
		return
	}
	switch hasCert, hasKey := v.has(p+".cert_file"), v.has(p+".key_file"); {
	case hasCert && !hasKey:
		v.report(p+".key_file", "required with cert_file (a client certificate needs both)")
	case hasKey && !hasCert:
		v.report(p+".cert_file", "required with key_file (a client certificate needs both)")
	}
	for _, f := range []string{"ca_file", "cert_file", "key_file", "server_name"} {
		if fp := p + "." + f; v.has(fp) && v.fieldString(fp, t) == "" {
			v.report(fp, "must not be empty (or leave %s out)", f)
		}
	}
	if !t.Enabled {
		for _, f := range []string{"ca_file", "cert_file", "key_file", "server_name", "insecure_skip_verify"} {
			if v.has(p + "." + f) {
				v.warn(p+".enabled", "tls is disabled, so its other settings are ignored (remove enabled: false to use them)")
				break
			}
		}
		return
	}
	if t.InsecureSkipVerify {
		v.warn(p+".insecure_skip_verify", "broker certificates are not verified: anyone in the middle can read the traffic and the SASL password (use ca_file instead)")
	}
}

// fieldString returns the string field of t named by the last element of
// path.
func (v *validator) fieldString(path string, t TLS) string {
	switch path[strings.LastIndexByte(path, '.')+1:] {
	case "ca_file":
		return t.CAFile
	case "cert_file":
		return t.CertFile
	case "key_file":
		return t.KeyFile
	case "server_name":
		return t.ServerName
	}
	return ""
}

func (v *validator) kafkaSASL() {
	s, p := &v.f.Kafka.SASL, "kafka.sasl"
	if !v.has(p) {
		return
	}
	mp := p + ".mechanism"
	if up := strings.ToUpper(s.Mechanism); slices.Contains(mechanisms, up) {
		s.Mechanism = up
	}
	switch {
	case !v.has(mp):
		v.report(mp, "required (one of %s)", strings.Join(mechanisms, ", "))
	case !slices.Contains(mechanisms, s.Mechanism):
		v.report(mp, "unknown SASL mechanism %s (valid: %s)", v.q(mp, s.Mechanism), strings.Join(mechanisms, ", "))
	}
	if up := p + ".username"; s.Username == "" {
		if v.has(up) {
			v.report(up, "must not be empty")
		} else {
			v.report(up, "required (e.g. username: ${KAFKA_USER})")
		}
	}
	v.password(p, s.Password, s.PasswordFile, "${KAFKA_PASSWORD}")
	if s.Mechanism == MechanismPlain && !v.f.Kafka.TLS.Enabled {
		v.warn(mp, "PLAIN without tls sends the password in clear text (add tls: { enabled: true })")
	}
}

// password checks the password and password_file fields of the mapping at
// p: exactly one of them, the password taken from the environment.
func (v *validator) password(p string, pw Secret, file, example string) {
	pp, fp := p+".password", p+".password_file"
	switch {
	case v.has(pp) && v.has(fp):
		v.report(fp, "give password or password_file, not both")
	case !v.has(pp) && !v.has(fp):
		v.report(pp, "required (write password: %s, or password_file: /path/to/secret)", example)
	case v.has(fp) && file == "":
		v.report(fp, "must not be empty")
	case v.has(pp) && pw == "":
		// An empty password is never right; the message does not say
		// whether a variable was set, only that the result is empty.
		v.report(pp, "must not be empty")
	}
	if v.literal(pp) {
		v.warn(pp, "password written literally in the file (write it as %s, or use password_file, so that it stays out of version control)", example)
	}
}

// registrySecurity checks the TLS and secret settings of the registry at
// rp.
func (v *validator) registrySecurity(rp string, r Registry) {
	if v.has(rp + ".password_file") {
		v.password(rp, r.Password, r.PasswordFile, "${SR_PASSWORD}")
		if !v.has(rp + ".username") {
			v.report(rp+".password_file", "needs registry.username")
		}
	} else if v.literal(rp + ".password") {
		v.warn(rp+".password", "password written literally in the file (write it as ${SR_PASSWORD}, or use password_file, so that it stays out of version control)")
	}
	if cp := rp + ".ca_file"; v.has(cp) && r.CAFile == "" {
		v.report(cp, "must not be empty")
	}
	if u, err := url.Parse(r.URL); err == nil && u.Scheme == "http" {
		for _, f := range []string{".ca_file", ".insecure_skip_verify"} {
			if v.has(rp + f) {
				v.report(rp+f, "only for an https registry URL")
			}
		}
		if v.has(rp+".password") || v.has(rp+".password_file") {
			v.warn(rp+".url", "basic auth over http sends the password in clear text (use https)")
		}
	}
	if r.InsecureSkipVerify {
		v.warn(rp+".insecure_skip_verify", "registry certificates are not verified (use ca_file instead)")
	}
}

// literalDSN warns about a Postgres DSN written in the file with a
// password in it.
func (v *validator) literalDSN(path string, dsn Secret) {
	if !v.literal(path) {
		return
	}
	s := string(dsn)
	hasPassword := strings.Contains(s, "password=")
	if u, err := url.Parse(s); err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			hasPassword = true
		}
	}
	if hasPassword {
		v.warn(path, "password written literally in the file (write the DSN as ${PG_DSN}, or keep the password in ~/.pgpass or PGPASSWORD)")
	}
}

// resolveKafkaFiles makes the file paths of kafka.tls and kafka.sasl
// absolute, relative to the topology file, so that clients built from
// File.Kafka alone find them.
func (v *validator) resolveKafkaFiles() {
	k := &v.f.Kafka
	for _, p := range []*string{&k.TLS.CAFile, &k.TLS.CertFile, &k.TLS.KeyFile, &k.SASL.PasswordFile} {
		*p = v.f.Resolve(*p)
	}
}
