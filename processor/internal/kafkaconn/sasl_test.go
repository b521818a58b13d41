package kafkaconn_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/topology"
)

// Credentials of the tests below; errors must never show them.
const (
	oauthToken   = "eyJhbGciOi.kafkaconn-Token.sig"
	accessKeyID  = "AKIAKAFKACONNTEST01"
	secretKey    = "kafkaconn-Secret/Key+Test"
	sessionToken = "kafkaconn-Session-Token"
)

// mechanismOf returns the SASL mechanisms that Options configures for k.
func mechanismOf(t *testing.T, k topology.Kafka) sasl.Mechanism {
	t.Helper()
	opts, err := kafkaconn.Options(k)
	if err != nil {
		t.Fatalf("Options: %v", err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ms, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism)
	if len(ms) != 1 {
		t.Fatalf("%d SASL mechanisms configured, want 1", len(ms))
	}
	return ms[0]
}

// authBytes returns the first message m sends to a broker at host.
func authBytes(t *testing.T, m sasl.Mechanism, host string) []byte {
	t.Helper()
	_, b, err := m.Authenticate(context.Background(), host)
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	return b
}

func TestOAuthBearer(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(oauthToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ext := map[string]string{"logicalCluster": "lkc-abc123", "identityPoolId": "pool-Xy1"}
	// RFC 7628 §3.1: gs2 header, then auth=Bearer and the extensions,
	// each ended by ^A, and a final ^A.
	want := "n,,\x01auth=Bearer " + oauthToken + "\x01identityPoolId=pool-Xy1\x01logicalCluster=lkc-abc123\x01\x01"
	for _, tt := range []struct {
		name string
		s    topology.SASL
		want string
	}{
		{"token", topology.SASL{Mechanism: "OAUTHBEARER", Token: oauthToken}, "n,,\x01auth=Bearer " + oauthToken + "\x01\x01"},
		{"token and extensions", topology.SASL{Mechanism: "OAUTHBEARER", Token: oauthToken, Extensions: ext}, want},
		{"token file", topology.SASL{Mechanism: "oauthbearer", TokenFile: tokenFile, Extensions: ext}, want},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := mechanismOf(t, topology.Kafka{Brokers: []string{"127.0.0.1:1"}, SASL: tt.s})
			if m.Name() != "OAUTHBEARER" {
				t.Fatalf("mechanism %s, want OAUTHBEARER", m.Name())
			}
			if got := string(authBytes(t, m, "127.0.0.1:9092")); got != tt.want {
				t.Fatalf("initial response %q, want %q", got, tt.want)
			}
		})
	}

	t.Run("token file re-read for every authentication", func(t *testing.T) {
		m := mechanismOf(t, topology.Kafka{Brokers: []string{"127.0.0.1:1"},
			SASL: topology.SASL{Mechanism: "OAUTHBEARER", TokenFile: tokenFile}})
		if got := string(authBytes(t, m, "127.0.0.1:9092")); !strings.Contains(got, "Bearer "+oauthToken+"\x01") {
			t.Fatalf("first authentication %q does not carry the file's token", got)
		}
		rotated := filepath.Join(dir, "token.new")
		if err := os.WriteFile(rotated, []byte("rotated-"+oauthToken), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(rotated, tokenFile); err != nil {
			t.Fatal(err)
		}
		if got := string(authBytes(t, m, "127.0.0.1:9092")); !strings.Contains(got, "Bearer rotated-"+oauthToken+"\x01") {
			t.Fatalf("authentication after the rotation %q does not carry the new token", got)
		}
		if err := os.Remove(tokenFile); err != nil {
			t.Fatal(err)
		}
		_, _, err := m.Authenticate(context.Background(), "127.0.0.1:9092")
		if err == nil || !strings.Contains(err.Error(), "kafka.sasl.token_file: ") || strings.Contains(err.Error(), oauthToken) {
			t.Fatalf("authentication with the token file gone: %v, want an error naming the field, without the token", err)
		}
	})
}

func TestAWSMSKIAM(t *testing.T) {
	const host = "b-1.orders.abc123.c2.kafka.eu-west-1.amazonaws.com"
	for _, tt := range []struct {
		name string
		c    topology.AWSCredentials
	}{
		{"long-term keys", topology.AWSCredentials{AccessKeyID: accessKeyID, SecretAccessKey: secretKey}},
		{"temporary credentials and a user agent", topology.AWSCredentials{AccessKeyID: accessKeyID, SecretAccessKey: secretKey,
			SessionToken: sessionToken, UserAgent: "exactly-orders"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := mechanismOf(t, topology.Kafka{Brokers: []string{host + ":9098"},
				SASL: topology.SASL{Mechanism: "AWS_MSK_IAM", AWS: tt.c}})
			if m.Name() != "AWS_MSK_IAM" {
				t.Fatalf("mechanism %s, want AWS_MSK_IAM", m.Name())
			}
			b := authBytes(t, m, host+":9098")
			if bytes.Contains(b, []byte(secretKey)) {
				t.Fatal("the authentication request carries the secret key itself")
			}
			var got map[string]string
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("payload %s: %v", b, err)
			}
			checkSigV4(t, got, host, "eu-west-1", tt.c)
		})
	}
}

// checkSigV4 checks an AWS_MSK_IAM payload (the JSON of aws-msk-iam-auth's
// IAMSaslClient, keys lowercased) against the credentials c: the
// credential scope, the session token, and a signature recomputed here
// after AWS's documentation of Signature Version 4 for a presigned GET
// (https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html).
func checkSigV4(t *testing.T, got map[string]string, host, region string, c topology.AWSCredentials) {
	t.Helper()
	date := got["x-amz-date"]
	if len(date) != len("20060102T150405Z") {
		t.Fatalf("x-amz-date %q", date)
	}
	scope := date[:8] + "/" + region + "/kafka-cluster/aws4_request"
	for k, want := range map[string]string{
		"version": "2020_10_22", "host": host, "action": "kafka-cluster:Connect",
		"x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-credential": string(c.AccessKeyID) + "/" + scope,
		"x-amz-signedheaders": "host", "x-amz-expires": "900", "x-amz-security-token": string(c.SessionToken),
	} {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	if c.UserAgent != "" && got["user-agent"] != c.UserAgent {
		t.Errorf("user-agent = %q, want %q", got["user-agent"], c.UserAgent)
	}
	q := url.Values{}
	for k, name := range map[string]string{"action": "Action", "x-amz-algorithm": "X-Amz-Algorithm", "x-amz-credential": "X-Amz-Credential",
		"x-amz-date": "X-Amz-Date", "x-amz-expires": "X-Amz-Expires", "x-amz-signedheaders": "X-Amz-SignedHeaders", "x-amz-security-token": "X-Amz-Security-Token"} {
		if v := got[k]; v != "" {
			q.Set(name, v)
		}
	}
	canonical := "GET\n/\n" + strings.ReplaceAll(q.Encode(), "+", "%20") + "\nhost:" + host + "\n\nhost\n" + hexSHA256("")
	toSign := "AWS4-HMAC-SHA256\n" + date + "\n" + scope + "\n" + hexSHA256(canonical)
	key := []byte("AWS4" + string(c.SecretAccessKey))
	for _, part := range []string{date[:8], region, "kafka-cluster", "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	if want := hex.EncodeToString(hmacSHA256(key, toSign)); got["x-amz-signature"] != want {
		t.Errorf("x-amz-signature %q, want %q (signed with the configured secret key)", got["x-amz-signature"], want)
	}
}

func hexSHA256(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func hmacSHA256(key []byte, s string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return h.Sum(nil)
}

// saslBroker starts a kfake cluster that takes mechanism and records the
// SaslAuthenticate bytes of every connection, answering each with reply.
func saslBroker(t *testing.T, mechanism string, reply []byte) (seeds []string, seen func() [][]byte) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var mu sync.Mutex
	var auths [][]byte
	c.ControlKey(int16(kmsg.SASLHandshake), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := req.(*kmsg.SASLHandshakeRequest).ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.SupportedMechanisms = []string{mechanism}
		if req.(*kmsg.SASLHandshakeRequest).Mechanism != mechanism {
			resp.ErrorCode = 33 // UNSUPPORTED_SASL_MECHANISM
		}
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		auths = append(auths, bytes.Clone(req.(*kmsg.SASLAuthenticateRequest).SASLAuthBytes))
		mu.Unlock()
		resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		resp.SASLAuthBytes = reply
		return resp, nil, true
	})
	return c.ListenAddrs(), func() [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(auths)
	}
}

// TestCloudMechanismsReachTheBroker runs a client built by Options against
// a broker that takes OAUTHBEARER or AWS_MSK_IAM, and checks what the
// broker received.
func TestCloudMechanismsReachTheBroker(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-west-1") // 127.0.0.1 names no region
	for _, tt := range []struct {
		name  string
		s     topology.SASL
		reply []byte
		check func(t *testing.T, b []byte)
	}{
		{"oauthbearer", topology.SASL{Mechanism: "OAUTHBEARER", Token: oauthToken,
			Extensions: map[string]string{"logicalCluster": "lkc-abc123"}}, nil,
			func(t *testing.T, b []byte) {
				if want := "n,,\x01auth=Bearer " + oauthToken + "\x01logicalCluster=lkc-abc123\x01\x01"; string(b) != want {
					t.Errorf("broker got %q, want %q", b, want)
				}
			}},
		{"aws msk iam", topology.SASL{Mechanism: "AWS_MSK_IAM",
			AWS: topology.AWSCredentials{AccessKeyID: accessKeyID, SecretAccessKey: secretKey, SessionToken: sessionToken}},
			[]byte(`{"version":"2020_10_22","request-id":"test"}`),
			func(t *testing.T, b []byte) {
				var got map[string]string
				if err := json.Unmarshal(b, &got); err != nil {
					t.Fatalf("broker got %q: %v", b, err)
				}
				checkSigV4(t, got, "127.0.0.1", "eu-west-1", topology.AWSCredentials{AccessKeyID: accessKeyID,
					SecretAccessKey: secretKey, SessionToken: sessionToken})
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := mechanismOf(t, topology.Kafka{Brokers: []string{"127.0.0.1:1"}, SASL: tt.s})
			seeds, seen := saslBroker(t, m.Name(), tt.reply)
			if err := metadata(t, topology.Kafka{Brokers: seeds, SASL: tt.s}); err != nil {
				t.Fatalf("metadata through %s: %v", m.Name(), err)
			}
			auths := seen()
			if len(auths) == 0 {
				t.Fatal("the broker saw no SaslAuthenticate")
			}
			for _, b := range auths {
				tt.check(t, b)
			}
		})
	}
}

func TestCloudMechanismErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		s    topology.SASL
		want string
	}{
		{"missing token file", topology.SASL{Mechanism: "OAUTHBEARER", TokenFile: filepath.Join(dir, "nope")}, "kafka.sasl.token_file: open "},
		{"empty token file", topology.SASL{Mechanism: "OAUTHBEARER", TokenFile: empty}, "kafka.sasl.token_file: empty secret file"},
		{"no token", topology.SASL{Mechanism: "OAUTHBEARER"}, "kafka.sasl.token: required"},
		{"no secret key", topology.SASL{Mechanism: "AWS_MSK_IAM", AWS: topology.AWSCredentials{AccessKeyID: accessKeyID, SessionToken: sessionToken}},
			"kafka.sasl.aws: access_key_id and secret_access_key are required"},
		{"no key ID", topology.SASL{Mechanism: "AWS_MSK_IAM", AWS: topology.AWSCredentials{SecretAccessKey: secretKey}},
			"kafka.sasl.aws: access_key_id and secret_access_key are required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := kafkaconn.Options(topology.Kafka{Brokers: []string{"127.0.0.1:1"}, SASL: tt.s})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want it to contain %q", err, tt.want)
			}
			for _, s := range []string{oauthToken, accessKeyID, secretKey, sessionToken} {
				if strings.Contains(err.Error(), s) {
					t.Fatalf("error shows a credential: %v", err)
				}
			}
		})
	}
}

// TestEveryMechanismBuilds: each SASL mechanism the topology file allows
// builds the franz-go mechanism of that name, so that a mechanism the
// spec gains is not accepted by validate and refused at start.
func TestEveryMechanismBuilds(t *testing.T) {
	for _, name := range topology.Allowed("kafka.sasl.mechanism") {
		t.Run(name, func(t *testing.T) {
			s := topology.SASL{Mechanism: name, Username: "u", Password: "p", Token: oauthToken,
				AWS: topology.AWSCredentials{AccessKeyID: accessKeyID, SecretAccessKey: secretKey}}
			if got := mechanismOf(t, topology.Kafka{Brokers: []string{"127.0.0.1:1"}, SASL: s}).Name(); got != name {
				t.Errorf("mechanism %s built %s", name, got)
			}
		})
	}
}
