package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v4"

	"github.com/exactly-io/exactly/cmd/exactly/cli"
	"github.com/exactly-io/exactly/topology"
)

// object is the part of a Kubernetes object the checks read.
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"` // ConfigMap
	Spec struct {
		// StatefulSet
		ServiceName string `yaml:"serviceName"`
		Replicas    int    `yaml:"replicas"`
		Selector    struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				SecurityContext struct {
					RunAsUser int  `yaml:"runAsUser"`
					FSGroup   *int `yaml:"fsGroup"`
				} `yaml:"securityContext"`
				Containers []container `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
					EmptyDir *struct{} `yaml:"emptyDir"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
		// PodDisruptionBudget
		MaxUnavailable *int `yaml:"maxUnavailable"`
		// Service (its selector is a plain map)
		ClusterIP string `yaml:"clusterIP"`
		Ports     []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
		// ServiceMonitor
		Endpoints []struct {
			Port string `yaml:"port"`
			Path string `yaml:"path"`
		} `yaml:"endpoints"`
	} `yaml:"spec"`
	raw map[string]any
}

type container struct {
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Env   []struct {
		Name      string `yaml:"name"`
		ValueFrom struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe  probe `yaml:"livenessProbe"`
	ReadinessProbe probe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

// readFile returns the contents of the file at path, failing the test
// when it cannot be read.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readObjects(t *testing.T) []object {
	t.Helper()
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests in kubernetes/")
	}
	var objs []object
	for _, f := range files {
		b := readFile(t, f)
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var o object
			if err := n.Decode(&o); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if err := n.Decode(&o.raw); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind == "" || o.APIVersion == "" || o.Metadata.Name == "" && o.Kind != "Kustomization" {
				t.Errorf("%s: an object without kind, apiVersion or name", f)
			}
			objs = append(objs, o)
		}
	}
	return objs
}

func byKind(objs []object, kind string) map[string]object {
	m := map[string]object{}
	for _, o := range objs {
		if o.Kind == kind {
			m[o.Metadata.Name] = o
		}
	}
	return m
}

// flagArgs splits args of the form --name=value or --name value into a map,
// and reports flags the command does not have.
func flagArgs(t *testing.T, where string, args []string) (cmd string, flags map[string]string) {
	t.Helper()
	if len(args) == 0 {
		t.Fatalf("%s: no args", where)
	}
	cmd, flags = args[0], map[string]string{}
	known := commandFlags(cmd)
	if known == nil {
		t.Fatalf("%s: exactly has no command %q", where, cmd)
	}
	for i := 1; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			t.Errorf("%s: argument %q is not a flag", where, args[i])
			continue
		}
		name, value, hasValue := strings.Cut(name, "=")
		if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
		}
		if !slices.Contains(known, name) {
			t.Errorf("%s: exactly %s has no flag --%s (it has %v)", where, cmd, name, known)
		}
		flags[name] = value
	}
	return cmd, flags
}

func TestKubernetesManifests(t *testing.T) {
	objs := readObjects(t)
	configMaps := byKind(objs, "ConfigMap")
	services := byKind(objs, "Service")
	pdbs := byKind(objs, "PodDisruptionBudget")
	monitors := byKind(objs, "ServiceMonitor")
	sets := byKind(objs, "StatefulSet")
	if len(sets) == 0 {
		t.Fatal("no StatefulSet")
	}
	images := map[string][]string{} // image -> StatefulSets
	stateful := 0                   // StatefulSets of stages with a dedupe or aggregate step
	defer func() {
		if len(images) > 1 {
			t.Errorf("the StatefulSets run different images: %v", images)
		}
		if stateful == 0 {
			t.Error("no StatefulSet runs a stateful stage: the manifests show no --state-dir volume")
		}
	}()
	for name, ss := range sets {
		t.Run(name, func(t *testing.T) {
			spec := ss.Spec
			if !subset(spec.Selector.MatchLabels, spec.Template.Metadata.Labels) || len(spec.Selector.MatchLabels) == 0 {
				t.Errorf("selector %v does not select the pod labels %v", spec.Selector.MatchLabels, spec.Template.Metadata.Labels)
			}
			if len(spec.Template.Spec.Containers) != 1 {
				t.Fatalf("want one container, got %d", len(spec.Template.Spec.Containers))
			}
			c := spec.Template.Spec.Containers[0]
			if p := imageProblem(c.Image); p != "" {
				t.Error(p)
			}
			images[c.Image] = append(images[c.Image], name)
			if u := spec.Template.Spec.SecurityContext.RunAsUser; u != imageUser(t) {
				t.Errorf("runAsUser %d, but the image runs as %d (deploy/container/Containerfile)", u, imageUser(t))
			}
			cmd, flags := flagArgs(t, name, c.Args)
			if cmd != "run" && cmd != "sink" {
				t.Errorf("command %q: want run or sink", cmd)
			}

			// The instance ID is the pod name: stable across restarts.
			if flags["instance-id"] != "$(POD_NAME)" {
				t.Errorf("--instance-id=%q, want $(POD_NAME)", flags["instance-id"])
			}
			podName := false
			for _, e := range c.Env {
				podName = podName || e.Name == "POD_NAME" && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
			}
			if !podName {
				t.Error("env POD_NAME is not the pod's metadata.name")
			}

			// Probes and metrics on the port --metrics-addr binds.
			_, port, err := net.SplitHostPort(flags["metrics-addr"])
			if err != nil {
				t.Fatalf("--metrics-addr=%q: %v", flags["metrics-addr"], err)
			}
			if host, _, _ := net.SplitHostPort(flags["metrics-addr"]); host != "0.0.0.0" && host != "" {
				t.Errorf("--metrics-addr host %q: probes from the kubelet cannot reach it", host)
			}
			ports := map[string]int{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			if got := ports["metrics"]; port != itoa(got) {
				t.Errorf("container port metrics=%d, --metrics-addr port %s", got, port)
			}
			for _, pr := range []struct {
				name, path string
				p          probe
			}{{"liveness", "/healthz", c.LivenessProbe}, {"readiness", "/readyz", c.ReadinessProbe}} {
				if pr.p.HTTPGet == nil {
					t.Errorf("%s probe: no httpGet", pr.name)
					continue
				}
				if pr.p.HTTPGet.Path != pr.path {
					t.Errorf("%s probe path %q, want %q", pr.name, pr.p.HTTPGet.Path, pr.path)
				}
				switch p := pr.p.HTTPGet.Port.(type) {
				case string:
					if _, ok := ports[p]; !ok || itoa(ports[p]) != port {
						t.Errorf("%s probe port %q is not the metrics port %s", pr.name, p, port)
					}
				case int:
					if itoa(p) != port {
						t.Errorf("%s probe port %d is not the metrics port %s", pr.name, p, port)
					}
				default:
					t.Errorf("%s probe port %v", pr.name, p)
				}
			}

			// The topology comes from a ConfigMap key, and names the
			// stage or sink; replicas stay within the partition count.
			topo := flags["topology"]
			var cmName string
			for _, m := range c.VolumeMounts {
				if rel, ok := strings.CutPrefix(topo, strings.TrimSuffix(m.MountPath, "/")+"/"); ok {
					for _, v := range spec.Template.Spec.Volumes {
						if v.Name == m.Name {
							cmName = v.ConfigMap.Name
							topo = rel
						}
					}
				}
			}
			cm, ok := configMaps[cmName]
			if !ok || cm.Data[topo] == "" {
				t.Fatalf("--topology=%s is not a key of a mounted ConfigMap (%q)", flags["topology"], cmName)
			}
			f := loadTopology(t, cm.Data[topo])
			var input string
			if cmd == "run" {
				st, ok := f.Stage(flags["stage"])
				if !ok {
					t.Fatalf("--stage=%q is not in the topology", flags["stage"])
				}
				input = st.Input.Topic
				if st.DedupeStep() != nil || st.AggregateStep() != nil {
					stateful++
					checkStateVolume(t, ss, c, flags["state-dir"])
				}
			} else {
				sk, ok := f.Sink(flags["sink"])
				if !ok {
					t.Fatalf("--sink=%q is not in the topology", flags["sink"])
				}
				input = sk.Input.Topic
			}
			tp, _ := f.Topic(input)
			if tp != nil && spec.Replicas > int(tp.Partitions) {
				t.Errorf("replicas %d above the %d partitions of %s", spec.Replicas, tp.Partitions, input)
			}

			// Its Service, PodDisruptionBudget and ServiceMonitor.
			svc, ok := services[spec.ServiceName]
			if !ok {
				t.Fatalf("serviceName %q: no such Service", spec.ServiceName)
			}
			sel, _ := svc.raw["spec"].(map[string]any)["selector"].(map[string]any)
			if len(sel) == 0 || !subset(strmap(sel), spec.Template.Metadata.Labels) {
				t.Errorf("Service %s selector %v does not select the pods", svc.Metadata.Name, sel)
			}
			if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != "metrics" {
				t.Errorf("Service %s ports %+v: want one with targetPort metrics", svc.Metadata.Name, svc.Spec.Ports)
			}
			pdbOK := false
			for _, pdb := range pdbs {
				if len(pdb.Spec.Selector.MatchLabels) > 0 && subset(pdb.Spec.Selector.MatchLabels, spec.Template.Metadata.Labels) {
					pdbOK = pdb.Spec.MaxUnavailable != nil && *pdb.Spec.MaxUnavailable == 1
				}
			}
			if !pdbOK {
				t.Error("no PodDisruptionBudget with maxUnavailable 1 selects the pods")
			}
			smOK := false
			for _, sm := range monitors {
				if len(sm.Spec.Selector.MatchLabels) > 0 && subset(sm.Spec.Selector.MatchLabels, svc.Metadata.Labels) {
					for _, e := range sm.Spec.Endpoints {
						smOK = smOK || e.Port == svc.Spec.Ports[0].Name && e.Path == "/metrics"
					}
				}
			}
			if !smOK {
				t.Error("no ServiceMonitor scrapes /metrics on the Service's port")
			}
		})
	}
}

// checkStateVolume checks the --state-dir of a stateful stage's
// StatefulSet: the image has no /tmp (so no default state dir) and the
// root file system is read-only, so the state dir must be a writable
// volume mounted in the container: an emptyDir, or a claim of the
// StatefulSet's volumeClaimTemplates, which the image's user can write to
// only through the pod's fsGroup (the volume's group, and a supplementary
// group of the container's processes).
func checkStateVolume(t *testing.T, ss object, c container, dir string) {
	t.Helper()
	if dir == "" {
		t.Error("a stateful stage without --state-dir: the image has no /tmp, so it cannot start")
		return
	}
	var volume string
	for _, m := range c.VolumeMounts {
		if (dir == m.MountPath || strings.HasPrefix(dir, strings.TrimSuffix(m.MountPath, "/")+"/")) && !m.ReadOnly {
			volume = m.Name
		}
	}
	if volume == "" {
		t.Errorf("--state-dir=%s is on no writable volume mount", dir)
		return
	}
	spec := ss.Spec.Template.Spec
	for _, v := range spec.Volumes {
		if v.Name == volume && v.EmptyDir != nil {
			return
		}
	}
	for _, vct := range ss.Spec.VolumeClaimTemplates {
		if vct.Metadata.Name == volume {
			if spec.SecurityContext.FSGroup == nil {
				t.Errorf("--state-dir=%s is on claim %q, but the pod sets no fsGroup: the volume is root's, and user %d cannot write to it", dir, volume, imageUser(t))
			}
			return
		}
	}
	t.Errorf("--state-dir=%s is on volume %q, which is neither an emptyDir nor a volumeClaimTemplate", dir, volume)
}

// releaseTag is a release version: vMAJOR.MINOR.PATCH, with an optional
// pre-release such as -rc.1.
var releaseTag = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)

// imageProblem says why image is not pinned to a release tag (or a
// digest), or returns "": a manifest that says latest, or no tag, deploys
// whatever was pushed last, and a rollback cannot name the version to go
// back to.
func imageProblem(image string) string {
	if _, digest, ok := strings.Cut(image, "@sha256:"); ok && len(digest) == 64 {
		return ""
	}
	i := strings.LastIndexByte(image, ':')
	if i < 0 || strings.Contains(image[i:], "/") {
		return fmt.Sprintf("image %q has no tag, which means latest; pin a release tag such as v0.1.0", image)
	}
	if tag := image[i+1:]; !releaseTag.MatchString(tag) {
		return fmt.Sprintf("image %q: tag %q is not a release version such as v0.1.0", image, tag)
	}
	return ""
}

func TestImageProblem(t *testing.T) {
	for _, c := range []struct {
		image string
		ok    bool
	}{
		{"ghcr.io/exactly-io/exactly:v0.1.0", true},
		{"registry.local:5000/exactly:v1.2.3-rc.1", true},
		{"ghcr.io/exactly-io/exactly@sha256:" + strings.Repeat("a", 64), true},
		{"ghcr.io/exactly-io/exactly:latest", false},
		{"ghcr.io/exactly-io/exactly", false},
		{"registry.local:5000/exactly", false},
		{"ghcr.io/exactly-io/exactly:main", false},
		{"", false},
	} {
		t.Run(c.image, func(t *testing.T) {
			if p := imageProblem(c.image); (p == "") != c.ok {
				t.Errorf("imageProblem(%q) = %q, want ok=%v", c.image, p, c.ok)
			}
		})
	}
}

// imageUser is the numeric user of the final stage of the Containerfile.
func imageUser(t *testing.T) int {
	t.Helper()
	b := readFile(t, "container/Containerfile")
	m := regexp.MustCompile(`(?m)^USER ([0-9]+)(:[0-9]+)?\s*$`).FindAllSubmatch(b, -1)
	if len(m) == 0 {
		t.Fatal("container/Containerfile: no numeric USER")
	}
	u, _ := strconv.Atoi(string(m[len(m)-1][1]))
	if u == 0 {
		t.Fatal("container/Containerfile: the image runs as root")
	}
	return u
}

func loadTopology(t *testing.T, src string) *topology.File {
	t.Helper()
	t.Setenv("PG_DSN", "postgres://u:p@db/x")
	path := filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := topology.Load(path)
	if err != nil {
		t.Fatalf("the ConfigMap's topology: %v", err)
	}
	return f
}

func TestSystemdUnits(t *testing.T) {
	units, _ := filepath.Glob("systemd/*.service")
	if len(units) == 0 {
		t.Fatal("no units")
	}
	for _, u := range units {
		b := readFile(t, u)
		var execs []string
		keys := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
				keys[k] = v
				if k == "ExecStart" {
					execs = append(execs, v)
				}
			}
		}
		if len(execs) != 1 {
			t.Errorf("%s: %d ExecStart lines, want 1", u, len(execs))
			continue
		}
		args := strings.Fields(execs[0])
		if filepath.Base(args[0]) != "exactly" {
			t.Errorf("%s: ExecStart runs %s", u, args[0])
		}
		cmd, flags := flagArgs(t, u, args[1:])
		for _, f := range []string{"topology", "instance-id", "metrics-addr"} {
			if flags[f] == "" {
				t.Errorf("%s: no --%s", u, f)
			}
		}
		// A stage may be stateful: its store goes in the unit's state
		// directory (%S is /var/lib), which systemd creates, gives the
		// dynamic user and keeps; the default, under /tmp, is private
		// (PrivateTmp=) and emptied at every stop.
		if cmd == "run" {
			if sd := keys["StateDirectory"]; sd == "" || flags["state-dir"] != "%S/"+sd {
				t.Errorf("%s: --state-dir=%q with StateDirectory=%q; want --state-dir=%%S/<StateDirectory>", u, flags["state-dir"], sd)
			}
		}
		if keys["KillSignal"] != "SIGTERM" || keys["Restart"] != "on-failure" {
			t.Errorf("%s: KillSignal=%s Restart=%s, want SIGTERM and on-failure", u, keys["KillSignal"], keys["Restart"])
		}
	}
}

// commandFlags returns the flags of exactly's command (e.g. "run",
// "topics create") as its --help lists them, or nil when there is no such
// command.
func commandFlags(command string) []string {
	var out bytes.Buffer
	if cli.Run(context.Background(), append(strings.Fields(command), "--help"), &out, io.Discard) != 0 {
		return nil
	}
	var names []string
	for _, line := range strings.Split(out.String(), "\n") {
		// The help's flags: "  --name VALUE" then an indented usage line.
		if rest, ok := strings.CutPrefix(line, "  --"); ok {
			names = append(names, strings.Fields(rest)[0])
		}
	}
	return names
}

func subset(sub, super map[string]string) bool {
	for k, v := range sub {
		if super[k] != v {
			return false
		}
	}
	return true
}

func strmap(m map[string]any) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		s, _ := v.(string)
		out[k] = s
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }
