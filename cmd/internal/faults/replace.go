package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/internal/poll"
	"github.com/fencegate/fencegate/raftstore"
)

// refusalWait bounds how long a wiped node restarted with its usual flags
// may take to refuse and exit.
const refusalWait = 30 * time.Second

// wipeNode is the lost disk: a token node is killed with -9, its data
// directory deleted, and the node restarted with the same command line, as
// an operator following the old docs would. It must refuse to start and
// say how to replace it; the nemesis then runs that replacement procedure.
func (n *Nemesis) wipeNode(ctx context.Context) error {
	t := n.stack.Tokens[n.rng.IntN(len(n.stack.Tokens))]
	return n.windowUntil(ctx, FaultWipeNode, t.ID, "lost data dir, restarted with its usual flags, replaced",
		func() error {
			if err := t.Proc.Kill(); err != nil {
				return err
			}
			if err := os.RemoveAll(t.DataDir); err != nil {
				return fmt.Errorf("wipe %s: %w", t.DataDir, err)
			}
			return n.expectRefusal(ctx, t, "an empty data dir")
		}, func() {}, func() error { return n.stack.Replace(context.WithoutCancel(ctx), t) })
}

// replaceNode is the planned replacement of a healthy node (new disk, same
// host): stopped cleanly, then the procedure of docs/operations.md end to end.
func (n *Nemesis) replaceNode(ctx context.Context) error {
	t := n.stack.Tokens[n.rng.IntN(len(n.stack.Tokens))]
	return n.windowUntil(ctx, FaultReplaceNode, t.ID, "stopped, data dir replaced, replaced through membership",
		func() error {
			if err := t.Proc.Stop(10 * time.Second); err != nil {
				return err
			}
			return os.RemoveAll(t.DataDir)
		}, func() {}, func() error { return n.stack.Replace(context.WithoutCancel(ctx), t) })
}

// expectRefusal starts t with its command line and requires it to exit
// with a message that names the replacement procedure; what says what
// its data directory went through ("an empty data dir").
func (n *Nemesis) expectRefusal(ctx context.Context, t *TokenNode, what string) error {
	if err := t.Proc.Start(); err != nil {
		return err
	}
	select {
	case <-t.Proc.Exited():
	case <-time.After(refusalWait):
		_ = t.Proc.Kill()
		return fmt.Errorf("%w: %s, restarted with %s and its usual flags, still runs after %v instead of refusing; its log ends:\n%s",
			ErrCheckFailed, t.ID, what, refusalWait, t.Proc.LogTail(8))
	case <-ctx.Done():
		_ = t.Proc.Kill()
		return ctx.Err()
	}
	_ = t.Proc.Kill() // reap: the next start needs a stopped process
	tail := t.Proc.LogTail(3)
	if !strings.Contains(tail, "members remove "+t.ID) {
		return fmt.Errorf("%w: %s, restarted with %s, exited without naming the replacement procedure; its log ends:\n%s",
			ErrCheckFailed, t.ID, what, tail)
	}
	n.log.Info("node refused to start", "node", t.ID, "data_dir", what)
	return nil
}

// Replace runs the replacement procedure of docs/operations.md for t, whose data
// directory is empty and whose process is stopped, as an operator would,
// with the fencegate command line: remove the member, start the node with
// its usual flags plus --join, add it back, and wait until the leader has
// promoted it to voter.
func (s *Stack) Replace(ctx context.Context, t *TokenNode) error {
	others := s.otherURLs(t)
	// The removal is refused while the other voters could not form a
	// quorum without t (a previous fault may still be healing): retry.
	if err := poll.Until(ctx, "members remove "+t.ID, 20*time.Millisecond, 60*time.Second, func(ctx context.Context) error {
		_, err := s.Operator(ctx, "token", "members", "remove", t.ID, "--servers", others, "--timeout", "10s")
		return err
	}); err != nil {
		return err
	}
	args := t.Proc.Args()
	if !containsArg(args, "--join") {
		args = append(args, "--join", others)
		t.Proc.SetArgs(args)
	}
	if err := t.Proc.Start(); err != nil {
		return err
	}
	// The operator waits for the new node to come up before adding it.
	_ = poll.Until(ctx, t.ID+" to answer", 20*time.Millisecond, 30*time.Second, func(ctx context.Context) error {
		_, err := s.status(ctx, t)
		return err
	})
	if err := poll.Until(ctx, "members add "+t.ID, 20*time.Millisecond, 90*time.Second, func(ctx context.Context) error {
		if !t.Proc.Running() {
			return fmt.Errorf("%w: %s exited while joining; its log ends:\n%s", ErrCheckFailed, t.ID, t.Proc.LogTail(8))
		}
		// A retry after an add whose wait for the promotion ran out: the
		// member may be a voter by now (adding a voter is refused).
		if s.isVoter(ctx, t, others) {
			return nil
		}
		_, err := s.Operator(ctx, "token", "members", "add", t.ID, t.RaftAddr, "http://"+t.APIAddr,
			"--servers", others, "--timeout", "10s", "--wait", "30s")
		return err
	}); err != nil {
		return err
	}
	s.log.Info("node replaced", "node", t.ID)
	return nil
}

// isVoter reports whether the leader lists t as a voter, as
// 'fencegate token members list --json' says.
func (s *Stack) isVoter(ctx context.Context, t *TokenNode, servers string) bool {
	out, err := s.Operator(ctx, "token", "members", "list", "--json", "--servers", servers, "--timeout", "5s")
	if err != nil {
		return false
	}
	var ms struct {
		Members []struct{ ID, Suffrage string }
	}
	if json.Unmarshal([]byte(out), &ms) != nil {
		return false
	}
	for _, m := range ms.Members {
		if m.ID == t.ID {
			return m.Suffrage == "Voter"
		}
	}
	return false
}

func containsArg(args []string, a string) bool {
	for _, x := range args {
		if x == a {
			return true
		}
	}
	return false
}

// otherURLs returns the API URLs of every token node but t, comma-separated.
func (s *Stack) otherURLs(t *TokenNode) string {
	var out []string
	for _, o := range s.Tokens {
		if o != t {
			out = append(out, "http://"+o.APIAddr)
		}
	}
	return strings.Join(out, ",")
}

// operatorMu serializes the operator's commands in its log.
var operatorMu sync.Mutex

// Operator runs a fencegate command as an operator would, appending the
// command and its output to logs/operator.log, and returns its output.
func (s *Stack) Operator(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.cfg.Binary, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	operatorMu.Lock()
	defer operatorMu.Unlock()
	if f, ferr := os.OpenFile(filepath.Join(s.cfg.Dir, "logs", "operator.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); ferr == nil {
		fmt.Fprintf(f, "=== %s $ fencegate %s\n%s", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(args, " "), out.String())
		if err != nil {
			fmt.Fprintf(f, "=== exit: %v\n", err)
		}
		f.Close()
	}
	if err != nil {
		return out.String(), fmt.Errorf("fencegate %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// restoreCopy is a data directory put back from an older copy (a VM
// snapshot rolled back, a backup restored by hand): a token node is killed
// with -9 and its data directory copied; it runs again, and the leader is
// killed and restarted (a term the copy does not hold, and an entry of
// it), until every other node saw it hold more than the copy. It is then
// killed, the copy put back and the node started with its usual command
// line: it must refuse to start and name the replacement procedure; the
// nemesis then runs that procedure.
func (n *Nemesis) restoreCopy(ctx context.Context) error {
	t := n.stack.Tokens[n.rng.IntN(len(n.stack.Tokens))]
	backup := t.DataDir + ".copy"
	return n.windowUntil(ctx, FaultRestoreCopy, t.ID, "data dir copied, leader restarted, copy put back, restarted with its usual flags, replaced",
		func() error {
			st, err := n.stack.status(ctx, t)
			if err != nil {
				return fmt.Errorf("status of %s before the copy: %w", t.ID, err)
			}
			if err := t.Proc.Kill(); err != nil {
				return err
			}
			if err := copyTree(t.DataDir, backup); err != nil {
				return err
			}
			if err := t.Proc.Start(); err != nil {
				return err
			}
			if l, err := n.stack.WaitLeader(ctx, 30*time.Second); err == nil && l != t {
				if err := l.Proc.Kill(); err != nil {
					return err
				}
				if err := l.Proc.Start(); err != nil {
					return err
				}
			}
			if err := poll.Until(ctx, "the other nodes to see "+t.ID+" hold more than the copy", 50*time.Millisecond, 60*time.Second, func(ctx context.Context) error {
				for _, o := range n.stack.Tokens {
					if o == t {
						continue
					}
					h, err := n.stack.held(ctx, o, t.ID)
					if err != nil {
						return err
					}
					if h.Term <= st.Term && h.CommitIndex <= st.LastIndex {
						return fmt.Errorf("%s saw %s at term %d, index %d committed; the copy holds term %d, index %d", o.ID, t.ID, h.Term, h.CommitIndex, st.Term, st.LastIndex)
					}
				}
				return nil
			}); err != nil {
				return err
			}
			if err := t.Proc.Kill(); err != nil {
				return err
			}
			if err := os.RemoveAll(t.DataDir); err != nil {
				return err
			}
			if err := os.Rename(backup, t.DataDir); err != nil {
				return fmt.Errorf("put back the copy of %s: %w", t.DataDir, err)
			}
			return n.expectRefusal(ctx, t, "an older copy of its data dir")
		}, func() {}, func() error {
			_ = os.RemoveAll(backup)
			if t.Proc.Running() {
				_ = t.Proc.Kill()
			}
			if err := os.RemoveAll(t.DataDir); err != nil {
				return err
			}
			return n.stack.Replace(context.WithoutCancel(ctx), t)
		})
}

// held returns what token node o saw node id's data directory hold, from
// its GET /v1/internal/state.
func (s *Stack) held(ctx context.Context, o *TokenNode, id string) (raftstore.Held, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+o.APIAddr+"/v1/internal/state", nil)
	if err != nil {
		return raftstore.Held{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return raftstore.Held{}, err
	}
	defer resp.Body.Close()
	var st raftstore.NodeState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return raftstore.Held{}, fmt.Errorf("state of %s: %w", o.ID, err)
	}
	return st.Held[id], nil
}

// copyTree copies the directory from to a new directory to, file by file.
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}
