//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// The image of deploy/container builds here with Debian's buildah, from
// scratch (no registry is reachable), and runs: `exactly version` prints
// the stamped version and the embedded demo passes inside it. The image
// holds the binary, CA certificates and the user's passwd and group
// entries, no shell, and runs as 65532.
func TestContainerImage(t *testing.T) {
	buildah := tool(t, "buildah", "deploy/local/up.sh installs it (apt-get install buildah)")
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
	root := bh("mount", ctr)
	files := imageFiles(t, root)
	want := []string{"etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/exactly"}
	if !slices.Equal(files, want) {
		t.Errorf("image files %v, want exactly %v (no shell, nothing else)", files, want)
	}
	// The mount point of --state-dir: an empty directory of the user's,
	// in a directory of root's; and no /tmp.
	for _, d := range []struct {
		path string
		uid  uint32
	}{{"var/lib/exactly", 65532}, {"var/lib", 0}} {
		fi, err := os.Stat(filepath.Join(root, d.path))
		if err != nil || !fi.IsDir() || fi.Sys().(*syscall.Stat_t).Uid != d.uid {
			t.Errorf("/%s in the image: %v, %v; want a directory owned by %d", d.path, fi, err, d.uid)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(root, "var/lib/exactly")); err != nil || len(entries) > 0 {
		t.Errorf("/var/lib/exactly in the image: %v, %v; want it empty", entries, err)
	}
	if _, err := os.Stat(filepath.Join(root, "tmp")); !os.IsNotExist(err) {
		t.Errorf("/tmp in the image: %v, want none", err)
	}
	bh("umount", ctr)

	run := func(args ...string) string {
		return bh(append([]string{"run", "--isolation", "chroot", ctr, "--", "/usr/local/bin/exactly"}, args...)...)
	}
	if got := run("version"); !strings.HasPrefix(got, "exactly "+version+" (commit ") {
		t.Errorf("exactly version in the image: %q, want version %s", got, version)
	}
	// With no temporary directory, the demo skips its dedupe part.
	if got := run("demo", "--events", "300"); !strings.Contains(got, "exactly once:") || !strings.Contains(got, "skipping the dedupe demo") {
		t.Errorf("exactly demo in the image, no writable directory:\n%s", got)
	}
	// With a volume mounted at /var/lib/exactly, as the deploy examples
	// mount one for --state-dir, it runs it: a dedupe stage keeps its
	// Pebble store there.
	vol := t.TempDir()
	if err := os.Chmod(vol, 0o777); err != nil { // writable by 65532
		t.Fatal(err)
	}
	got := bh("run", "--isolation", "chroot", "--volume", vol+":/var/lib/exactly", "--env", "TMPDIR=/var/lib/exactly",
		ctr, "--", "/usr/local/bin/exactly", "demo", "--events", "300")
	if !strings.Contains(got, "exactly once:") || !strings.Contains(got, "deduplicated") || strings.Contains(got, "skipping the dedupe demo") {
		t.Errorf("exactly demo in the image, state on a mounted volume:\n%s", got)
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
