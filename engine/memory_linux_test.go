package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCgroupLimit reads the control-group limits of a made-up file tree: the smallest limit on
// the process's group or any group above it, in either cgroup version, and 0 for "no limit".
func TestCgroupLimit(t *testing.T) {
	cases := []struct {
		name   string
		cgroup string
		files  map[string]string
		want   uint64
	}{
		{"v2, a parent's limit binds", "0::/a/b\n", map[string]string{
			"sys/fs/cgroup/a/b/memory.max": "max\n",
			"sys/fs/cgroup/a/memory.max":   "1073741824\n",
		}, 1 << 30},
		{"v2, the smaller of two", "0::/a/b\n", map[string]string{
			"sys/fs/cgroup/a/b/memory.max": "536870912\n",
			"sys/fs/cgroup/a/memory.max":   "1073741824\n",
			"sys/fs/cgroup/memory.max":     "max\n",
		}, 512 << 20},
		{"v2, no limit", "0::/\n", map[string]string{"sys/fs/cgroup/memory.max": "max\n"}, 0},
		{"v1, the container's group at the mount's root", "12:pids:/docker/x\n4:memory:/docker/x\n", map[string]string{
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n",
		}, 256 << 20},
		{"v1, among other controllers", "5:cpu,memory:/g\n", map[string]string{
			"sys/fs/cgroup/memory/g/memory.limit_in_bytes": "268435456\n",
		}, 256 << 20},
		{"v1, no limit", "4:memory:/\n", map[string]string{
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}, 0},
		{"v1 and v2 both, the smaller", "4:memory:/\n0::/\n", map[string]string{
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n",
			"sys/fs/cgroup/memory.max":                   "134217728\n",
		}, 128 << 20},
		{"a memory file of another controller's group is not read", "3:cpu:/\n", map[string]string{
			"sys/fs/cgroup/memory.max": "134217728\n",
		}, 0},
		{"malformed lines and values", "garbage\n0::relative\n0::/\n", map[string]string{
			"sys/fs/cgroup/memory.max":          "lots\n",
			"sys/fs/cgroup/relative/memory.max": "1\n",
		}, 0},
		{"no /proc/self/cgroup", "", nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{}
			for name, body := range c.files {
				files[name] = body
			}
			if c.cgroup != "" {
				files["proc/self/cgroup"] = c.cgroup
			}
			for name, body := range files {
				p := filepath.Join(root, name)
				require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
				require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
			}
			require.Equal(t, c.want, cgroupLimit(root))
		})
	}
}
