#!/bin/bash
# the reward: 1 when the solution reached the allowed host, and a host the allowlist does not name
# stays out of reach (example.org: refused by the policy, not resolved)
reached=$(cat /app/status.txt 2>/dev/null)
if python3 -c "import urllib.request; urllib.request.urlopen('https://example.org/', timeout=10)" 2>/dev/null; then
  echo "example.org was reachable: the allowlist is not enforced" >&2
  echo 0 > /logs/verifier/reward.txt
elif [ "$reached" = "200" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
