#!/usr/bin/env bash
# Run inside the fresh machine by deploy/try-fresh-machine: docs/production.md's "Install with
# systemd", step by step in its words, with `chrono services up` standing in for production's
# services, then the check of "On a fresh machine (systemd-nspawn)". Argument: the release.
set -euo pipefail
REV=$1
stamp() { echo "== $(date -u +%T) $*"; }

stamp "stand-in services: chrono services up from a developer's checkout of the release"
apt-get update -q >/dev/null
apt-get install -y -q make python3 python3-venv >/dev/null
mkdir -p /root/chrono-dev && tar -xzf "/root/chrono-$REV.tar.gz" -C /root/chrono-dev
make -C /root/chrono-dev install >/dev/null 2>&1
/root/chrono-dev/.venv/bin/chrono services up --no-progress 2>&1 | grep -E " is up |creating"
# Debian's packages enable their own instances, which would take the same ports at the next boot.
systemctl disable -q postgresql redis-server rabbitmq-server

stamp "step 1: the account and Python"
apt-get install -y python3 python3-venv curl >/dev/null
useradd --system --user-group --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin chrono

stamp "step 2: the release and its virtualenv"
V=$REV
mkdir -p /opt/chrono/releases/$V/src
tar -xf "/root/chrono-$V.tar.gz" -C /opt/chrono/releases/$V/src
/usr/bin/python3 -m venv /opt/chrono/releases/$V/venv
/opt/chrono/releases/$V/venv/bin/pip install -q /opt/chrono/releases/$V/src
ln -sfn releases/$V/venv /opt/chrono/venv
ln -sfn releases/$V/src /opt/chrono/src
/opt/chrono/venv/bin/chrono --version

stamp "step 3: the services' database, users, vhost (made by the stand-in) and its setting"
# `chrono services up` runs PostgreSQL with synchronous_commit off (a developer's choice), which
# production settings refuse (chrono.E006): the hint's own fix.
psql "postgresql://chrono:$(sed -n 's/^DATABASE_PASSWORD=//p' /var/lib/chrono/credentials.env)@127.0.0.1:5432/chrono" \
  -qc 'ALTER ROLE chrono SET synchronous_commit = on'

stamp "step 4: the environment file"
/opt/chrono/venv/bin/python /opt/chrono/src/deploy/make-env systemd --allowed-hosts "$(hostname),localhost" \
    --from-credentials /var/lib/chrono/credentials.env --services-host 127.0.0.1
chgrp chrono /etc/chrono/chrono.env
printf 'CHRONO_METRICS_PORT=9101\n' > /etc/chrono/beat-1.env
printf 'CHRONO_METRICS_PORT=9104\n' > /etc/chrono/beat-2.env
printf 'CHRONO_METRICS_PORT=9105\nWORKER_ARGS="--pool threads --concurrency 16"\n' > /etc/chrono/worker-billing.env
set -a; . /etc/chrono/chrono.env; set +a
C=/opt/chrono/venv/bin/chrono
$C check --deploy --fail-level WARNING
$C check --tag chrono_services

stamp "step 5: the units"
install -m 0644 /opt/chrono/src/deploy/systemd/* /etc/systemd/system/
systemctl daemon-reload
systemd-analyze verify /etc/systemd/system/chrono-*.service

stamp "step 6: systemctl start chrono-migrate"
systemctl start chrono-migrate
journalctl -u chrono-migrate -o cat | grep -E "static files|Applying" | tail -2 || true

stamp "step 7: systemctl enable --now"
systemctl enable -q --now chrono-web chrono-beat@1 chrono-beat@2 chrono-worker@billing \
    chrono-reaper chrono-indexer
systemctl enable -q chrono.target
sleep 10

stamp "step 8: check"
systemctl list-units 'chrono-*' --no-pager --no-legend
ps -u chrono -o pid=,psr=,args= | cut -c1-110
curl -sf -H 'X-Forwarded-Proto: https' -H 'Host: localhost' http://127.0.0.1:8000/health/; echo
for port in 9101 9102 9103 9104 9105; do curl -s -o /dev/null -w "probe $port %{http_code}\n" http://127.0.0.1:$port/health; done

stamp "step 9: a tenant, its grant and an API key"
$C tenants create acme --name "Acme" --json >/dev/null
$C grants add --tenant acme --task 'chrono.*' --queue billing
KEY=$($C api-keys issue --tenant acme --name ci --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')

stamp "run: 300 one-time jobs 10-100 s ahead and 3 cron jobs every 2 s, through the web"
python3 - > /root/jobs.json <<'EOF'
import json
jobs = [{"job_type": "chrono.echo", "queue": "billing", "delay_ms": 10_000 + i * 300,
         "kwargs": {"i": i}} for i in range(300)]
jobs += [{"job_type": "chrono.echo", "queue": "billing", "cron_expression": "*/2 * * * * *",
          "kwargs": {"cron": c}} for c in range(3)]
jobs += [{"job_type": "chrono.demo.report", "queue": "billing", "delay_ms": 5_000}]  # logs a line
print(json.dumps(jobs))
EOF
curl -sf -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -H 'X-Forwarded-Proto: https' -H 'Host: localhost' --data @/root/jobs.json \
  http://127.0.0.1:8000/api/v1/jobs/bulk > /root/created.json
python3 -c 'import json; b = json.load(open("/root/created.json")); print("created", b["created"], "failed", b["failed"])'
sleep 45
stamp "kill -9 of beat 2 (pid $(systemctl show -p MainPID --value chrono-beat@2))"
kill -9 "$(systemctl show -p MainPID --value chrono-beat@2)"
sleep 12
systemctl show -p NRestarts,ActiveState chrono-beat@2 | tr '\n' ' '; echo
journalctl -u 'chrono-beat@*' --since -14s -o short-precise | grep -E "holds|started|status=9" | cut -c1-170 || true
sleep 50
CUTOFF=$(date -u -d '-3 seconds' +%Y-%m-%dT%H:%M:%S+00:00)
for job in $(python3 -c 'import json; print(*json.load(open("/root/created.json"))["ids"][300:303])'); do
  $C jobs cancel --tenant acme "$job" --json >/dev/null
done
sleep 5

stamp "check: every execution, with chrono executions list --json"
$C executions list --tenant acme --json --limit 100000 > /root/executions.json
python3 - "$CUTOFF" <<'EOF'
import collections, datetime, json, sys
ids = json.load(open("/root/created.json"))["ids"]
cutoff = datetime.datetime.fromisoformat(sys.argv[1])
at = lambda text: datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
by_job = collections.defaultdict(list)
for execution in json.load(open("/root/executions.json")):
    by_job[execution["job_id"]].append(execution)
once = [e for job in ids[:300] for e in by_job[job]]
per_job = collections.Counter(len(by_job[job]) for job in ids[:300])
statuses = collections.Counter(e["status"] for e in once)
late = sorted((at(e["dispatched_at"]) - at(e["scheduled_for"])).total_seconds() for e in once)
print(f"one-time: executions per job {dict(per_job)}, {dict(statuses)}, "
      f"dispatched late by at most {late[-1]:.3f} s (median {late[150]:.3f} s)")
ok = per_job == {1: 300} and statuses == {"SUCCEEDED": 300}
for job in ids[300:303]:
    runs = sorted((at(e["scheduled_for"]), e["status"]) for e in by_job[job]
                  if at(e["scheduled_for"]) <= cutoff)
    gaps = {(b[0] - a[0]).total_seconds() for a, b in zip(runs, runs[1:])}
    finals = collections.Counter(status for _, status in runs)
    print(f"cron {job[:8]}: {len(runs)} occurrences {runs[0][0]:%H:%M:%S}-{runs[-1][0]:%H:%M:%S},"
          f" gaps {sorted(gaps)} s, {dict(finals)}")
    ok = ok and gaps == {2.0} and set(finals) == {"SUCCEEDED"}
print("none missed" if ok else "SOMETHING MISSED")
sys.exit(0 if ok else 1)
EOF
journalctl -u 'chrono-beat@*' -o cat | grep "published=" | tail -2 | cut -c1-100 || true
for stream in audit execution; do
  printf '%s documents: ' "$stream"
  curl -s "$SEARCH_URL/logs-chrono.$stream-default/_count" | python3 -c 'import json,sys; print(json.load(sys.stdin)["count"])'
done
printf 'errors logged by the units: '; journalctl -u 'chrono-*' -o cat | grep -c -E " ERROR |Traceback" || true
