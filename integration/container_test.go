//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The image of deploy/container builds here with Debian's buildah, from
// scratch (no registry is reachable), and runs: `exactly version` prints
// the stamped version and the embedded demo passes inside it. The image
// holds the binary, CA certificates and the user's passwd and group
// entries, no shell, and runs as 65532.
func TestContainerImage(t *testing.T) {
	buildah, err := exec.LookPath("buildah")
	if err != nil {
		t.Fatal("buildah is not installed: deploy/local/up.sh installs it (apt-get install buildah)")
	}
	store := t.TempDir()
	global := []string{"--storage-driver", "vfs", "--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "runroot")}
	bh := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(buildah, append(slices.Clone(global), args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, tail(string(out), 30))
		}
		return strings.TrimSpace(string(out))
	}
	const version, tag = "v0.0.0-it", "localhost/exactly:it"
	build := exec.Command("bash", "../deploy/container/build.sh", "image", tag)
	build.Env = append(os.Environ(), "VERSION="+version, "BUILDER="+buildah, "BUILDER_FLAGS="+strings.Join(global, " "))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build.sh image: %v\n%s", err, tail(string(out), 30))
	}
	t.Cleanup(func() { _ = exec.Command(buildah, append(slices.Clone(global), "rmi", "--all", "--force")...).Run() })

	if user := bh("inspect", "--format", "{{.OCIv1.Config.User}}", tag); user != "65532:65532" {
		t.Errorf("image user %q, want 65532:65532", user)
	}
	if ep := bh("inspect", "--format", "{{.OCIv1.Config.Entrypoint}}", tag); ep != "[/usr/local/bin/exactly]" {
		t.Errorf("entrypoint %s", ep)
	}

	ctr := bh("from", "--pull-never", tag)
	t.Cleanup(func() { _ = exec.Command(buildah, append(slices.Clone(global), "rm", ctr)...).Run() })
	files := imageFiles(t, bh("mount", ctr))
	want := []string{"etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/exactly"}
	if !slices.Equal(files, want) {
		t.Errorf("image files %v, want exactly %v (no shell, nothing else)", files, want)
	}
	bh("umount", ctr)

	run := func(args ...string) string {
		return bh(append([]string{"run", "--isolation", "chroot", ctr, "--", "/usr/local/bin/exactly"}, args...)...)
	}
	if got := run("version"); !strings.HasPrefix(got, "exactly "+version+" (commit ") {
		t.Errorf("exactly version in the image: %q, want version %s", got, version)
	}
	if got := run("demo", "--events", "300"); !strings.Contains(got, "exactly once:") {
		t.Errorf("exactly demo in the image:\n%s", got)
	}
}

// imageFiles lists the regular files under root, relative and sorted.
func imageFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
