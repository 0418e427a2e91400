#!/bin/bash
if [ "$(cat /app/greeting.txt 2>/dev/null)" = "greetings from the build stage" ] && [ ! -e /src/scratch.txt ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
