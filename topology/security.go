package topology

import (
	"maps"
	"net/url"
	"slices"
	"strings"
)

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
	mechanisms := specOf("kafka.sasl.mechanism").enum
	switch {
	case !v.has(mp):
		v.report(mp, "required (one of %s)", strings.Join(mechanisms, ", "))
		return
	case !slices.Contains(mechanisms, s.Mechanism): // reported by checkSpec
		return
	}
	takes := saslFields[s.Mechanism]
	for _, f := range allSASLFields {
		if fp := p + "." + f; v.has(fp) && !slices.Contains(takes, f) {
			v.report(fp, "not used by %s (it takes %s)", s.Mechanism, strings.Join(takes, ", "))
		}
	}
	switch s.Mechanism {
	case mechanismOAuthBearer:
		v.secret(p, "token", s.Token, s.TokenFile, "${KAFKA_OAUTH_TOKEN}")
		v.extensions(p+".extensions", s.Extensions)
		if !v.f.Kafka.TLS.Enabled {
			v.warn(mp, "OAUTHBEARER without tls sends the token in clear text (add tls: { enabled: true })")
		}
	case mechanismAWSMSKIAM:
		v.awsCredentials(p+".aws", &s.AWS)
		if !v.f.Kafka.TLS.Enabled {
			v.warn(mp, "MSK takes IAM authentication on its TLS listener only, port 9098 (add tls: { enabled: true })")
		}
	default:
		if up := p + ".username"; s.Username == "" {
			if v.has(up) {
				v.report(up, "must not be empty")
			} else {
				v.report(up, "required (e.g. username: ${KAFKA_USER})")
			}
		}
		v.password(p, s.Password, s.PasswordFile, "${KAFKA_PASSWORD}")
		if s.Mechanism == mechanismPlain && !v.f.Kafka.TLS.Enabled {
			v.warn(mp, "PLAIN without tls sends the password in clear text (add tls: { enabled: true })")
		}
	}
}

// saslFields are the fields of kafka.sasl that each mechanism takes,
// besides mechanism itself.
var saslFields = map[string][]string{
	mechanismPlain:       {"username", "password", "password_file"},
	mechanismScramSHA256: {"username", "password", "password_file"},
	mechanismScramSHA512: {"username", "password", "password_file"},
	mechanismOAuthBearer: {"token", "token_file", "extensions"},
	mechanismAWSMSKIAM:   {"aws"},
}

var allSASLFields = []string{"username", "password", "password_file", "token", "token_file", "extensions", "aws"}

// password checks the password and password_file fields of the mapping at
// p: exactly one of them, the password taken from the environment.
func (v *validator) password(p string, pw Secret, file, example string) {
	v.secret(p, "password", pw, file, example)
}

// secret checks the fields name and name_file of the mapping at p: exactly
// one of them, the value taken from the environment.
func (v *validator) secret(p, name string, val Secret, file, example string) {
	vp, fp := p+"."+name, p+"."+name+"_file"
	switch {
	case v.has(vp) && v.has(fp):
		v.report(fp, "give %s or %s_file, not both", name, name)
	case !v.has(vp) && !v.has(fp):
		v.report(vp, "required (write %s: %s, or %s_file: /path/to/secret)", name, example, name)
	case v.has(fp) && file == "":
		v.report(fp, "must not be empty")
	case v.has(vp) && val == "":
		// An empty secret is never right; the message does not say
		// whether a variable was set, only that the result is empty.
		v.report(vp, "must not be empty")
	}
	if v.literal(vp) {
		v.warn(vp, "%s written literally in the file (write it as %s, or use %s_file, so that it stays out of version control)", name, example, name)
	}
}

// extensions checks OAUTHBEARER's SASL extensions against RFC 7628 §3.1
// and KIP-342: keys are letters only and not "auth", values printable
// ASCII (VCHAR, space, tab, CR, LF) and not empty.
func (v *validator) extensions(p string, ext map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(ext)) {
		kp := p + "." + k
		if !isExtensionKey(k) {
			v.report(kp, "invalid extension name %q (letters only, and not \"auth\")", truncate(k))
			continue
		}
		if val := ext[k]; val == "" || strings.IndexFunc(val, func(r rune) bool {
			return (r < 0x21 || r > 0x7e) && r != ' ' && r != '\t' && r != '\r' && r != '\n'
		}) >= 0 {
			v.report(kp, "invalid extension value (printable ASCII, not empty)")
		}
	}
}

func isExtensionKey(k string) bool {
	if k == "" || k == "auth" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i] | 0x20; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// awsCredentials checks AWS_MSK_IAM's credentials at p (kafka.sasl.aws),
// or, when the file has no aws mapping, takes them from the standard AWS
// variables. Messages never hold a credential.
func (v *validator) awsCredentials(p string, c *AWSCredentials) {
	if !v.has(p) {
		get := func(name string) Secret {
			s, _ := v.d.lookup(name)
			return Secret(s)
		}
		c.AccessKeyID, c.SecretAccessKey, c.SessionToken = get(envAWSAccessKeyID), get(envAWSSecretAccessKey), get(envAWSSessionToken)
		if (c.AccessKeyID == "" || c.SecretAccessKey == "") && !v.d.offline {
			v.report(p, "required: AWS_MSK_IAM takes its credentials from %s and %s (and %s for temporary ones), which are not both set; "+
				"set them, or write aws: { access_key_id: ${...}, secret_access_key: ${...} }",
				envAWSAccessKeyID, envAWSSecretAccessKey, envAWSSessionToken)
		}
		return
	}
	for _, f := range []struct {
		name, env string
		val       Secret
	}{
		{"access_key_id", envAWSAccessKeyID, c.AccessKeyID},
		{"secret_access_key", envAWSSecretAccessKey, c.SecretAccessKey},
	} {
		fp := p + "." + f.name
		switch {
		case !v.has(fp):
			v.report(fp, "required (e.g. %s: ${%s})", f.name, f.env)
		case f.val == "":
			v.report(fp, "must not be empty")
		}
	}
	for _, f := range []struct{ name, env string }{{"secret_access_key", envAWSSecretAccessKey}, {"session_token", envAWSSessionToken}} {
		if fp := p + "." + f.name; v.literal(fp) {
			v.warn(fp, "%s written literally in the file (write it as ${%s}, so that it stays out of version control)", f.name, f.env)
		}
	}
	if up := p + ".user_agent"; v.has(up) && c.UserAgent == "" {
		v.report(up, "must not be empty (or leave user_agent out)")
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
	for _, p := range []*string{&k.TLS.CAFile, &k.TLS.CertFile, &k.TLS.KeyFile, &k.SASL.PasswordFile, &k.SASL.TokenFile} {
		*p = v.f.Resolve(*p)
	}
}
