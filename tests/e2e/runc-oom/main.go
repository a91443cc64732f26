// A runc wrapper for tests/e2e on hosts whose root lacks CAP_SYS_RESOURCE (some sandboxed VMs):
// there no process may lower its oom_score_adj, yet the kubelet asks for -998 on every pod
// sandbox and -997 on critical pods, and runc then fails to start them ("failed to update
// /proc/self/oom_score_adj: Permission denied"). Before `runc create|run|exec`, it raises a
// negative process.oomScoreAdj in the bundle's config.json (or the --process file) to 0, then
// execs the real runc (RUNC_REAL, default /usr/sbin/runc) with the same arguments.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// clamp raises a negative oomScoreAdj at keys (["process","oomScoreAdj"] or ["oomScoreAdj"])
// in the JSON file at path to 0, keeping every other field as it is.
func clamp(path string, keys ...string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	obj := doc
	for _, k := range keys[:len(keys)-1] {
		next, ok := obj[k].(map[string]any)
		if !ok {
			return nil
		}
		obj = next
	}
	last := keys[len(keys)-1]
	if v, ok := obj[last].(float64); !ok || v >= 0 {
		return nil
	}
	obj[last] = 0
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

func main() {
	real := os.Getenv("RUNC_REAL")
	if real == "" {
		real = "/usr/sbin/runc"
	}
	args := os.Args[1:]
	command, bundle, process := "", "", ""
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--bundle" || a == "-b":
			if i+1 < len(args) {
				bundle = args[i+1]
			}
		case a == "--process" || a == "-p":
			if i+1 < len(args) {
				process = args[i+1]
			}
		case command == "" && (a == "create" || a == "run" || a == "exec"):
			command = a
		}
	}
	var err error
	switch {
	case (command == "create" || command == "run") && bundle != "":
		err = clamp(filepath.Join(bundle, "config.json"), "process", "oomScoreAdj")
	case command == "exec" && process != "":
		err = clamp(process, "oomScoreAdj")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "runc-oom:", err)
		os.Exit(1)
	}
	if err := syscall.Exec(real, append([]string{real}, args...), os.Environ()); err != nil {
		fmt.Fprintln(os.Stderr, "runc-oom: exec", real, err)
		os.Exit(1)
	}
}
