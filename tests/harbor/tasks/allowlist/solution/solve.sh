#!/bin/bash
python3 -c "import urllib.request; print(urllib.request.urlopen('https://pypi.org/simple/six/', timeout=30).status)" > /app/status.txt
