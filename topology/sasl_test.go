package topology

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Secrets of the OAUTHBEARER and AWS_MSK_IAM tests; none may appear in a
// message, a warning or a formatted File.
const (
	testToken        = "eyJhbGciOi.test-Token.sig"
	testAccessKeyID  = "AKIATESTKEYID0000"
	testSecretKey    = "wJalrXUtnFEMI-test-Secret"
	testSessionToken = "FwoGZXIvYXdz-test-Session"
)

var cloudEnv = env(map[string]string{
	"KAFKA_OAUTH_TOKEN":   testToken,
	"MSK_KEY_ID":          testAccessKeyID,
	"MSK_SECRET":          testSecretKey,
	"MSK_SESSION":         testSessionToken,
	envAWSAccessKeyID:     testAccessKeyID,
	envAWSSecretAccessKey: testSecretKey,
	envAWSSessionToken:    testSessionToken,
	"EMPTY":               "",
})

// noCloudSecret fails if s shows any of the test credentials.
func noCloudSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range []string{testToken, testAccessKeyID, testSecretKey, testSessionToken} {
		if strings.Contains(s, secret) {
			t.Fatalf("%s shows a secret: %s", what, s)
		}
	}
}

func TestParseManagedKafkaSASL(t *testing.T) {
	tests := []struct {
		name, extra string
		lookup      func(string) (string, bool)
		want        SASL
	}{
		{"oauthbearer token from env", `  tls: {}
  sasl:
    mechanism: oauthbearer
    token: ${KAFKA_OAUTH_TOKEN}
    extensions: { logicalCluster: lkc-abc123, identityPoolId: pool-Xy1 }
`, cloudEnv, SASL{Mechanism: mechanismOAuthBearer, Token: testToken,
			Extensions: map[string]string{"logicalCluster": "lkc-abc123", "identityPoolId": "pool-Xy1"}}},
		{"oauthbearer token file", "  tls: {}\n  sasl: { mechanism: OAUTHBEARER, token_file: secrets/token }\n", cloudEnv,
			SASL{Mechanism: mechanismOAuthBearer, TokenFile: filepath.Join("secrets", "token")}},
		{"msk iam from the file's variables", `  tls: {}
  sasl:
    mechanism: AWS_MSK_IAM
    aws:
      access_key_id: ${MSK_KEY_ID}
      secret_access_key: ${MSK_SECRET}
      session_token: ${MSK_SESSION}
      user_agent: exactly-orders
`, cloudEnv, SASL{Mechanism: mechanismAWSMSKIAM, AWS: AWSCredentials{AccessKeyID: testAccessKeyID,
			SecretAccessKey: testSecretKey, SessionToken: testSessionToken, UserAgent: "exactly-orders"}}},
		{"msk iam from the standard AWS variables", "  tls: {}\n  sasl: { mechanism: aws_msk_iam }\n", cloudEnv,
			SASL{Mechanism: mechanismAWSMSKIAM, AWS: AWSCredentials{AccessKeyID: testAccessKeyID,
				SecretAccessKey: testSecretKey, SessionToken: testSessionToken}}},
		{"msk iam, long-term keys without a session token", "  tls: {}\n  sasl: { mechanism: AWS_MSK_IAM }\n",
			env(map[string]string{envAWSAccessKeyID: testAccessKeyID, envAWSSecretAccessKey: testSecretKey}),
			SASL{Mechanism: mechanismAWSMSKIAM, AWS: AWSCredentials{AccessKeyID: testAccessKeyID, SecretAccessKey: testSecretKey}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := check(t, withKafka(tt.extra), tt.lookup)
			if !reflect.DeepEqual(f.Kafka.SASL, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", f.Kafka.SASL, tt.want)
			}
			if w := warnings(f); w != nil {
				t.Fatalf("unexpected warnings: %q", w)
			}
			noCloudSecret(t, "formatting the settings", fmt.Sprintf("%v %+v %#v", f.Kafka, f.Kafka, f.Kafka))
		})
	}
}

func TestParseManagedKafkaSASLValidation(t *testing.T) {
	tests := []struct {
		name, extra string
		lookup      func(string) (string, bool)
		want        []string
	}{
		{"oauthbearer without a token", "  sasl: { mechanism: OAUTHBEARER }\n", cloudEnv,
			[]string{`t.yaml:4:9: kafka.sasl.token: required (write token: ${KAFKA_OAUTH_TOKEN}, or token_file: /path/to/secret)`}},
		{"oauthbearer token and token file", "  sasl: { mechanism: OAUTHBEARER, token: \"${KAFKA_OAUTH_TOKEN}\", token_file: t }\n", cloudEnv,
			[]string{`t.yaml:4:78: kafka.sasl.token_file: give token or token_file, not both`}},
		{"oauthbearer empty token from env", "  sasl: { mechanism: OAUTHBEARER, token: \"${EMPTY}\" }\n", cloudEnv,
			[]string{`t.yaml:4:42: kafka.sasl.token: must not be empty`}},
		{"oauthbearer with a password", "  sasl: { mechanism: OAUTHBEARER, token: \"${KAFKA_OAUTH_TOKEN}\", password: \"${KAFKA_OAUTH_TOKEN}\" }\n", cloudEnv,
			[]string{`t.yaml:4:76: kafka.sasl.password: not used by OAUTHBEARER (it takes token, token_file, extensions)`}},
		{"oauthbearer bad extensions", "  sasl:\n    mechanism: OAUTHBEARER\n    token: ${KAFKA_OAUTH_TOKEN}\n    extensions: { auth: x, logical-cluster: y, ok: \"\" }\n", cloudEnv,
			[]string{
				`t.yaml:7:25: kafka.sasl.extensions.auth: invalid extension name "auth" (letters only, and not "auth")`,
				`t.yaml:7:45: kafka.sasl.extensions.logical-cluster: invalid extension name "logical-cluster" (letters only, and not "auth")`,
				`t.yaml:7:52: kafka.sasl.extensions.ok: invalid extension value (printable ASCII, not empty)`,
			}},
		{"scram with a token", "  sasl: { mechanism: SCRAM-SHA-512, username: u, password: \"${KAFKA_OAUTH_TOKEN}\", token: x }\n", cloudEnv,
			[]string{`t.yaml:4:91: kafka.sasl.token: not used by SCRAM-SHA-512 (it takes username, password, password_file)`}},
		{"msk iam without credentials", "  sasl: { mechanism: AWS_MSK_IAM }\n", env(nil),
			[]string{`t.yaml:4:9: kafka.sasl.aws: required: AWS_MSK_IAM takes its credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones), which are not both set; set them, or write aws: { access_key_id: ${...}, secret_access_key: ${...} }`}},
		{"msk iam with only the key ID in the environment", "  sasl: { mechanism: AWS_MSK_IAM }\n", env(map[string]string{envAWSAccessKeyID: testAccessKeyID}),
			[]string{`t.yaml:4:9: kafka.sasl.aws: required: AWS_MSK_IAM takes its credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones), which are not both set; set them, or write aws: { access_key_id: ${...}, secret_access_key: ${...} }`}},
		{"msk iam mapping without the secret", "  sasl: { mechanism: AWS_MSK_IAM, aws: { access_key_id: \"${MSK_KEY_ID}\" } }\n", cloudEnv,
			[]string{`t.yaml:4:40: kafka.sasl.aws.secret_access_key: required (e.g. secret_access_key: ${AWS_SECRET_ACCESS_KEY})`}},
		{"msk iam empty key ID from env", "  sasl: { mechanism: AWS_MSK_IAM, aws: { access_key_id: \"${EMPTY}\", secret_access_key: \"${MSK_SECRET}\" } }\n", cloudEnv,
			[]string{`t.yaml:4:57: kafka.sasl.aws.access_key_id: must not be empty`}},
		{"msk iam unset variable", "  sasl: { mechanism: AWS_MSK_IAM, aws: { access_key_id: \"${MSK_KEY_ID}\", secret_access_key: \"${NOPE}\" } }\n", cloudEnv,
			[]string{`t.yaml:4:93: kafka.sasl.aws.secret_access_key: environment variable "NOPE" is not set`}},
		{"msk iam with a username", "  sasl: { mechanism: AWS_MSK_IAM, username: u }\n", cloudEnv,
			[]string{`t.yaml:4:45: kafka.sasl.username: not used by AWS_MSK_IAM (it takes aws)`}},
		{"msk iam unknown aws field", "  sasl: { mechanism: AWS_MSK_IAM, aws: { region: eu-west-1 } }\n", cloudEnv,
			[]string{
				`t.yaml:4:40: kafka.sasl.aws.access_key_id: required (e.g. access_key_id: ${AWS_ACCESS_KEY_ID})`,
				`t.yaml:4:40: kafka.sasl.aws.secret_access_key: required (e.g. secret_access_key: ${AWS_SECRET_ACCESS_KEY})`,
				`t.yaml:4:42: kafka.sasl.aws.region: unknown field (valid: access_key_id, secret_access_key, session_token, user_agent)`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(withKafka(tt.extra)), tt.lookup)
			if err != nil {
				noCloudSecret(t, "the errors", err.Error())
			}
			check(t, withKafka(tt.extra), tt.lookup, tt.want...)
		})
	}
}

func TestParseManagedKafkaSASLWarnings(t *testing.T) {
	tests := []warningCase{
		{"literal token", "  tls: {}\n  sasl: { mechanism: OAUTHBEARER, token: " + testToken + " }\n",
			[]string{`t.yaml:5:42: kafka.sasl.token: token written literally in the file (write it as ${KAFKA_OAUTH_TOKEN}, or use token_file, so that it stays out of version control)`}},
		{"oauthbearer without tls", "  sasl: { mechanism: OAUTHBEARER, token_file: /run/secrets/token }\n",
			[]string{`t.yaml:4:22: kafka.sasl.mechanism: OAUTHBEARER without tls sends the token in clear text (add tls: { enabled: true })`}},
		{"msk iam without tls", "  sasl: { mechanism: AWS_MSK_IAM }\n",
			[]string{`t.yaml:4:22: kafka.sasl.mechanism: MSK takes IAM authentication on its TLS listener only, port 9098 (add tls: { enabled: true })`}},
		{"literal aws secret and session token", "  tls: {}\n  sasl: { mechanism: AWS_MSK_IAM, aws: { access_key_id: " + testAccessKeyID +
			", secret_access_key: " + testSecretKey + ", session_token: " + testSessionToken + " } }\n",
			[]string{
				`t.yaml:5:95: kafka.sasl.aws.secret_access_key: secret_access_key written literally in the file (write it as ${AWS_SECRET_ACCESS_KEY}, so that it stays out of version control)`,
				`t.yaml:5:137: kafka.sasl.aws.session_token: session_token written literally in the file (write it as ${AWS_SESSION_TOKEN}, so that it stays out of version control)`,
			}},
	}
	checkKafkaWarnings(t, tests, cloudEnv, func(t *testing.T, w string) { noCloudSecret(t, "the warnings", w) })
}
