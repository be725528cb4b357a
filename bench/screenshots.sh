#!/usr/bin/env bash
# Takes the screenshots of rotor's two web pages that the README shows
# (docs/img/web-lesson.png, docs/img/web-live.png): the browser tests that
# drive the pages save them when ROTOR_SCREENSHOTS names a folder.
set -euo pipefail
cd "$(dirname "$0")/.."
export ROTOR_SCREENSHOTS="$PWD/docs/img"
go test ./cmd/rotor -run '^TestWebLessonPage$' -count=1
go test ./server -run '^TestLivePageDrains$' -count=1
ls -l docs/img/web-*.png
