// Package systemtest holds no code: its packages test the whole agent, the
// way an operator runs it, where no one component's tests can:
//
//   - crash: the binary around its process: SIGKILL under load, SIGTERM and
//     SIGHUP, exit codes, /healthz, every component past its default timers,
//     panics (scripts/crash-test.sh runs the long versions);
//   - hostile: hostile clients against every network source at its default
//     limits: peak RSS, honest clients served (scripts/hostile.sh prints the
//     table);
//   - monitoring: the status page in a real browser, sluice top in a real
//     terminal, sluice tap, under load;
//   - topology: several agents in tiers over Avro RPC.
//
// Their helpers are testutil's (StartAgent for the binary, agenttest.Start
// for an agent in the test's process); a component's own process tests (the
// spooldir source under SIGKILL, the file channel on a full disk) stay with
// the component.
package systemtest
