// Package image runs the container image built from the repository's
// Dockerfile (scripts/build-image.sh, with podman) in front of the suite's
// Trino: the real Trino CLI gets the right rows through it, the responses
// carry the proxy's cost headers (so the ONNX Runtime in the image loads
// and the embedded model estimates), /readyz answers 200, and the process
// runs as a non-root user. The Helm chart's rendered Deployment runs the
// same image with `podman play kube`.
//
// It runs when PRESTROID_TRINO_URL, PRESTROID_PODMAN (scripts/install-podman.sh
// prints it) and PRESTROID_IMAGE (the tag built) are set, as `make
// image-test` does, and skips otherwise; the chart test also needs
// PRESTROID_HELM. Containers run on the host's network (the harness Trino
// listens on 127.0.0.1) on free ports, and are removed when the test ends.
// See package e2e.
package image

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
)

// env returns the Trino URL, podman and the image, or skips the test.
func env(t *testing.T) (trino, podman, image string) {
	t.Helper()
	trino = e2e.TrinoURL(t)
	podman, image = os.Getenv("PRESTROID_PODMAN"), os.Getenv("PRESTROID_IMAGE")
	if podman == "" || image == "" {
		t.Skip("PRESTROID_PODMAN and PRESTROID_IMAGE not set: run `make image-test`, which builds the image")
	}
	return trino, podman, image
}

// run runs podman with args and returns its stdout, failing the test on an
// error (with its stderr).
func run(t *testing.T, podman string, args ...string) string {
	t.Helper()
	out, err := try(podman, args...)
	if err != nil {
		t.Fatalf("podman %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func try(podman string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, podman, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// waitReady waits up to a minute for url to answer 200.
func waitReady(t *testing.T, url string, alive func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	last := "no answer"
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if err := alive(); err != nil {
			t.Fatalf("%s: the container is not running: %v", url, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within a minute (last: %s)", url, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkNonRoot fails the test unless the container's main process (seen
// from the host, by its PID) runs with uid and gid 65534 (nobody).
func checkNonRoot(t *testing.T, podman, container string) {
	t.Helper()
	pid := strings.TrimSpace(run(t, podman, "inspect", "--format", "{{.State.Pid}}", container))
	status, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		t.Fatalf("container %s: PID %q: %v", container, pid, err)
	}
	ids := map[string][]string{}
	for _, l := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && (k == "Uid" || k == "Gid" || k == "Name") {
			ids[k] = strings.Fields(v)
		}
	}
	t.Logf("container %s: PID %s %v uid %v gid %v", container, pid, ids["Name"], ids["Uid"], ids["Gid"])
	for _, k := range []string{"Uid", "Gid"} {
		if len(ids[k]) != 4 {
			t.Fatalf("%s of PID %s unreadable: %q", k, pid, status)
		}
		for _, id := range ids[k] { // real, effective, saved, file system
			if id != "65534" {
				t.Errorf("%s of the proxy's process: %v; want 65534 (nobody), never 0", k, ids[k])
				break
			}
		}
	}
	if u := strings.TrimSpace(run(t, podman, "exec", container, "id", "-u")); u == "0" || u == "" {
		t.Errorf("podman exec id -u in %s: %q; want a non-root uid", container, u)
	}
}

// cli runs one statement with the Trino CLI jar against server and returns
// its TSV output.
func cli(t *testing.T, jar, server, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "java", "-jar", jar, "--server", server, "--user", "e2e-image",
		"--output-format", "TSV", "--execute", sql).CombinedOutput()
	if err != nil {
		t.Fatalf("trino cli against %s: %v\n%s", server, err, out)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" && !strings.Contains(l, "jline") && !strings.Contains(l, "WARNING") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

// A join over the TPC-H connector: the estimator plans it (cost headers
// from the model), and its 25 rows are known.
const joinSQL = `SELECT n.name, count(*) AS customers FROM tpch.tiny.nation n JOIN tpch.tiny.customer c ON c.nationkey = n.nationkey GROUP BY n.name ORDER BY n.name`

// checkProxying runs the checks every container of the image must pass
// with base as the proxy's client URL.
func checkProxying(t *testing.T, trino, base string) {
	t.Helper()
	jar := e2e.RequireEnv(t, "PRESTROID_TRINO_CLI")

	// The real CLI through the container gets Trino's own answer.
	want, got := cli(t, jar, trino, joinSQL), cli(t, jar, base, joinSQL)
	if got != want {
		t.Errorf("CLI through the image differs from Trino directly:\n--- direct\n%s\n--- image\n%s", want, got)
	}
	if n := len(strings.Split(got, "\n")); n != 25 || !strings.Contains(got, "CANADA\t") {
		t.Errorf("CLI through the image: %d lines, want the 25 nations:\n%s", n, got)
	}

	// The same query by hand (with a literal, so that neither its history
	// nor its shape's, learned from the CLI's run, answers: a model
	// scores it): the POST's cost headers, then every page through the
	// container (URIs rewritten to it) up to the result.
	bySQL := strings.Replace(joinSQL, " GROUP BY", " WHERE n.nationkey >= 0 GROUP BY", 1)
	resp, p := e2e.Do(t, "POST", base+"/v1/statement", bySQL, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("POST /v1/statement through the image: %s", resp.Status)
	}
	h := resp.Header
	t.Logf("cost headers: cluster %q decision %q cpu %q model %q estimate %q", h.Get("X-Prestroid-Cluster"),
		h.Get("X-Prestroid-Decision"), h.Get("X-Prestroid-Cpu-Estimate"), h.Get("X-Prestroid-Model"), h.Get("X-Prestroid-Estimate"))
	if c := h.Get("X-Prestroid-Cluster"); c != "default" {
		t.Errorf("X-Prestroid-Cluster %q, want default", c)
	}
	if d := h.Get("X-Prestroid-Decision"); d == "" || strings.HasPrefix(d, "fail-open") {
		t.Errorf("X-Prestroid-Decision %q: want an estimated decision (the image's estimator did not answer)", d)
	}
	if cpu, err := strconv.ParseFloat(h.Get("X-Prestroid-Cpu-Estimate"), 64); err != nil || !(cpu > 0) {
		t.Errorf("X-Prestroid-Cpu-Estimate %q: want a positive number of CPU seconds", h.Get("X-Prestroid-Cpu-Estimate"))
	}
	if h.Get("X-Prestroid-Model") == "" || h.Get("X-Prestroid-Estimate") == "" {
		t.Errorf("X-Prestroid-Model %q, X-Prestroid-Estimate %q: want the embedded model's estimate (ONNX Runtime in the image)",
			h.Get("X-Prestroid-Model"), h.Get("X-Prestroid-Estimate"))
	}
	var rows [][]any
	for {
		if len(p.Data) > 0 {
			var page [][]any
			if err := json.Unmarshal(p.Data, &page); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, page...)
		}
		if p.NextURI == "" {
			break
		}
		if !strings.HasPrefix(p.NextURI, base+"/") {
			t.Fatalf("nextUri %s does not point at the container (%s)", p.NextURI, base)
		}
		resp, p = e2e.Do(t, "GET", p.NextURI, "", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET nextUri through the image: %s", resp.Status)
		}
	}
	if p.Error != nil || p.Stats.State != "FINISHED" {
		t.Fatalf("query through the image: state %s, error %+v", p.Stats.State, p.Error)
	}
	if len(rows) != 25 {
		t.Errorf("%d rows through the image by hand, want 25", len(rows))
	}

	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/readyz: %s, want 200", resp.Status)
	}
}

// logsOnFailure shows a container's log when the test failed.
func logsOnFailure(t *testing.T, podman, container string) {
	if t.Failed() {
		out, _ := exec.Command(podman, "logs", container).CombinedOutput()
		t.Logf("container %s log (tail):\n%s", container, e2e.Tail(string(out), 4000))
	}
}

// TestImage runs the image as `docker run` would, configured by
// environment variables, on a free port of the host's network.
func TestImage(t *testing.T) {
	trino, podman, image := env(t)
	if user := strings.TrimSpace(run(t, podman, "image", "inspect", "--format", "{{.Config.User}}", image)); user == "" || user == "root" || user == "0" {
		t.Errorf("image %s runs as user %q; want a non-root user", image, user)
	}
	port := e2e.FreePort(t)
	base := "http://127.0.0.1:" + port
	name := fmt.Sprintf("prestroid-e2e-image-%d", rand.Uint32())
	t.Cleanup(func() {
		logsOnFailure(t, podman, name)
		if _, err := try(podman, "rm", "--force", "--time", "5", name); err != nil {
			t.Errorf("removing container %s: %v", name, err)
		}
	})
	start := time.Now()
	// The image's entrypoint listens on 0.0.0.0:8080; a later --listen wins.
	run(t, podman, "run", "--detach", "--name", name, "--network", "host",
		"--env", "PRESTROID_UPSTREAM="+trino,
		"--env", "PRESTROID_PUBLIC_URL="+base,
		image, "--listen", "127.0.0.1:"+port)
	alive := func() error {
		state, err := try(podman, "inspect", "--format", "{{.State.Status}}", name)
		if err == nil && strings.TrimSpace(state) != "running" {
			err = fmt.Errorf("state %s", strings.TrimSpace(state))
		}
		return err
	}
	waitReady(t, base+"/readyz", alive)
	t.Logf("container %s ready on %s in %s", name, base, time.Since(start).Round(time.Millisecond))

	checkNonRoot(t, podman, name)
	checkProxying(t, trino, base)
	if err := alive(); err != nil {
		t.Errorf("after the queries: %v", err)
	}
}

// The config volume mount of the chart's Deployment as rendered: the
// ConfigMap's config.yaml alone, at the path the command reads.
const chartConfigMount = `            - name: config
              mountPath: /etc/prestroid/config.yaml
              subPath: config.yaml
`

// TestHelmChart renders deploy/helm/prestroid with the image and runs the
// rendered ConfigMap and Deployment with `podman play kube` (its Service is
// ignored): the pod runs with the chart's security context (uid 65534, a
// read-only root file system, no capabilities) and passes the same checks
// on its client port, and /readyz answers 200 on its admin port, where
// the chart's probes look (podman itself runs no probes without systemd).
//
// Podman 4.3 (Debian 12) mounts a ConfigMap volume as a directory even
// with subPath, so the one config mount is rewritten to mount the
// ConfigMap's directory at /etc/prestroid (the same file at the same
// path); nothing else of the rendered manifest changes. The pod runs on
// podman's bridge network with the chart's ports published on the host
// (play kube publishes each containerPort), and reaches the harness Trino
// at host.containers.internal.
func TestHelmChart(t *testing.T) {
	trino, podman, image := env(t)
	helm := os.Getenv("PRESTROID_HELM")
	if helm == "" {
		t.Skip("PRESTROID_HELM not set: run `make image-test`, which builds helm (scripts/install-helm.sh)")
	}
	repo, tag, ok := strings.Cut(image, ":")
	if !ok || strings.Contains(tag, "/") {
		t.Fatalf("PRESTROID_IMAGE %q: want repository:tag", image)
	}
	if !strings.Contains(repo, "/") {
		repo = "localhost/" + repo // where podman keeps a locally built image
	}
	upstream := strings.Replace(strings.Replace(trino, "127.0.0.1", "host.containers.internal", 1), "localhost", "host.containers.internal", 1)
	client, admin := e2e.FreePort(t), e2e.FreePort(t)
	base := "http://127.0.0.1:" + client
	release := fmt.Sprintf("e2e%d", rand.Uint32())
	out, err := exec.Command(helm, "template", release, filepath.Join(e2e.RepoRoot(t), "deploy/helm/prestroid"),
		"--set", "image.repository="+repo, "--set", "image.tag="+tag, "--set", "image.pullPolicy=Never",
		"--set", "ports.client="+client, "--set", "ports.admin="+admin,
		"--set", "config.clusters[0].name=default", "--set", "config.clusters[0].url="+upstream,
		"--set", "config.public_url="+base).Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	manifest := string(out)
	if strings.Count(manifest, chartConfigMount) != 1 {
		t.Fatalf("the rendered Deployment has no config mount\n%s\nto adapt for podman 4.3:\n%s", chartConfigMount, manifest)
	}
	manifest = strings.Replace(manifest, chartConfigMount, `            - name: config
              mountPath: /etc/prestroid
`, 1)
	file := filepath.Join(t.TempDir(), "prestroid.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := release + "-prestroid-pod-0"
	container := pod + "-prestroid"
	t.Cleanup(func() {
		logsOnFailure(t, podman, container)
		if out, err := try(podman, "play", "kube", "--down", file); err != nil {
			t.Errorf("podman play kube --down: %v\n%s", err, out)
		}
	})
	start := time.Now()
	// Without systemd podman cannot schedule the probes' health checks and
	// says so on stderr; the pod runs regardless.
	if out, err := try(podman, "play", "kube", file); err != nil {
		t.Fatalf("podman play kube: %v\n%s", err, out)
	}
	alive := func() error {
		state, err := try(podman, "inspect", "--format", "{{.State.Status}}", container)
		if err == nil && strings.TrimSpace(state) != "running" {
			err = fmt.Errorf("state %s", strings.TrimSpace(state))
		}
		return err
	}
	waitReady(t, "http://127.0.0.1:"+admin+"/readyz", alive)
	t.Logf("pod %s ready on %s (admin port %s) in %s", pod, base, admin, time.Since(start).Round(time.Millisecond))

	spec := strings.Fields(run(t, podman, "inspect", "--format", "{{.Config.User}} {{.HostConfig.ReadonlyRootfs}} {{.ImageName}}", container))
	if len(spec) != 3 {
		t.Fatalf("podman inspect %s: %q", container, spec)
	}
	t.Logf("container %s: user %s, read-only root %s, image %s", container, spec[0], spec[1], spec[2])
	if spec[0] != "65534:65534" || spec[1] != "true" || spec[2] != repo+":"+tag {
		t.Errorf("container %s: user %s, read-only root file system %s, image %s; want the chart's 65534:65534, true and %s:%s",
			container, spec[0], spec[1], spec[2], repo, tag)
	}
	checkNonRoot(t, podman, container)
	checkProxying(t, trino, base)
	if err := alive(); err != nil {
		t.Errorf("after the queries: %v", err)
	}
}
