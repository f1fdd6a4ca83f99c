# Sourced by the other scripts: the emulator's venv and the AWS settings for local use.
# The SDK takes its endpoint only from the standard AWS_ENDPOINT_URL, so pointing these
# scripts at LocalStack or real AWS is a matter of setting it (and real credentials).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
MOTO_VERSION="5.2.5"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
# Keep the SDK away from the EC2 metadata service on machines that are not EC2.
export AWS_EC2_METADATA_DISABLED=true

ensure_moto() {
  if [ ! -x "$VENV/bin/moto_server" ]; then
    echo "installing moto[server]==$MOTO_VERSION into $VENV" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check "moto[server]==$MOTO_VERSION"
  fi
}

# port_is_free PORT: true when nothing listens on 127.0.0.1:PORT.
port_is_free() {
  python3 -c 'import socket, sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.close()' "$1" 2>/dev/null
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# start_moto PORT LOGFILE: starts the emulator in the background, sets MOTO_PID, waits until
# it answers.
start_moto() {
  local port="$1" log="$2"
  "$VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
  MOTO_PID=$!
  for _ in $(seq 1 100); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$port/moto-api/" 2>/dev/null; then
      return 0
    fi
    if ! kill -0 "$MOTO_PID" 2>/dev/null; then
      echo "moto_server exited; its log:" >&2; cat "$log" >&2; return 1
    fi
    sleep 0.1
  done
  echo "moto_server did not answer on port $port" >&2
  return 1
}
