package redis

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// In a Sentinel failover, planned (SENTINEL FAILOVER) or not, the leading
// sentinel makes the chosen replica a master (REPLICAOF NO ONE), confirms
// it from the replica's INFO, which it reads every second during a
// failover, and only then announces it (+switch-master), when rueidis
// follows. Meanwhile, about a second, the store still writes to the old
// master, which stays writable and discards those writes when it is made
// a replica: every charge of that second would be lost, silently.
//
// So the store listens to every sentinel, and when one announces that it
// is promoting a replica of the store's master
// (+failover-state-send-slaveof-noone), it pauses writes on the old master
// (CLIENT PAUSE ... WRITE, for failoverPause): decisions then wait, and
// follow the failure policy when their deadline passes, until rueidis
// switches to the new master, and nothing admitted is lost but the writes
// made before the pause that the replica had not yet received. A master
// that refuses CLIENT PAUSE (an ACL without @admin, a managed service)
// keeps the old behaviour; Sentinel.NoFailoverPause turns the pause off.
// The setting that would make the old master refuse writes by itself,
// min-replicas-to-write, makes the new one refuse them too until the old
// master has become its replica, about ten seconds later (see docs/redis.md).

// failoverPause is how long the old master's writes are paused: the
// sentinels announce the new master about a second after they promote it.
const failoverPause = 3 * time.Second

// failoverGuard pauses the old master's writes when a sentinel starts
// promoting a replica of it.
type failoverGuard struct {
	c      rueidis.Client // the store's: it reaches the current master
	master string
	logger *slog.Logger
	subs   []rueidis.Client // one per sentinel
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startFailoverGuard subscribes to every sentinel of sn.
func startFailoverGuard(c rueidis.Client, sn *Sentinel, tc *tls.Config, logger *slog.Logger) *failoverGuard {
	ctx, cancel := context.WithCancel(context.Background())
	g := &failoverGuard{c: c, master: sn.Master, logger: logger, cancel: cancel}
	for _, addr := range sn.Addrs {
		sub, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Username: sn.Username,
			Password: sn.Password, TLSConfig: tc, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			logger.Warn("floodgate/redis: cannot listen to a sentinel; a failover it leads may lose the charges made until it announces the new master", "sentinel", addr, "err", err)
			continue
		}
		g.subs = append(g.subs, sub)
		g.wg.Go(func() { g.listen(ctx, sub) })
	}
	return g
}

// listen receives one sentinel's failover events until ctx ends,
// subscribing again a second after the connection breaks.
func (g *failoverGuard) listen(ctx context.Context, sub rueidis.Client) {
	cmd := sub.B().Subscribe().Channel("+failover-state-send-slaveof-noone").Build()
	for ctx.Err() == nil {
		sub.Receive(ctx, cmd, func(m rueidis.PubSubMessage) { g.promoting(ctx, m.Message) })
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// promoting pauses the master's writes if msg ("slave <name> <ip> <port>
// @ <master> <ip> <port>") names the store's master set and the master
// the store's client is connected to: a client that already follows
// another master is left alone.
func (g *failoverGuard) promoting(ctx context.Context, msg string) {
	_, rest, _ := strings.Cut(msg, " @ ")
	f := strings.Fields(rest)
	if len(f) != 3 || f[0] != g.master {
		return
	}
	old, ok := g.c.Nodes()[net.JoinHostPort(f[1], f[2])]
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := old.Do(ctx, old.B().ClientPause().Timeout(failoverPause.Milliseconds()).Write().Build()).Error()
	if err != nil {
		g.logger.Warn("floodgate/redis: a sentinel is promoting a replica, and the old master refused to pause writes: the charges made until the new master is announced are lost", "err", err)
		return
	}
	g.logger.Info("floodgate/redis: a sentinel is promoting a replica: the old master's writes are paused until the new master is announced", "promoting", msg)
}

// close stops listening.
func (g *failoverGuard) close() {
	g.cancel()
	for _, sub := range g.subs {
		sub.Close()
	}
	g.wg.Wait()
}
