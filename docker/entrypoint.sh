#!/bin/sh
# Entry point of every sodm-spark container (run by the base image's /opt/entrypoint.sh).
#   init-secret  create the cluster's Spark RPC secret once (the compose service init-secret)
#   jupyter ...  as below, and without JUPYTER_TOKEN a random token, printed once to the log
#   anything     give Spark the secret, then run the command
# No secret or token is stored in the image or the repository.
set -eu

secret_file=${SODM_SPARK_SECRET_FILE:-/secrets/spark-secret}
image_conf=${SODM_IMAGE_CONF_DIR:-/opt/spark/conf}

if [ "${1:-}" = init-secret ]; then
    # Kept in the secrets volume across restarts so that the master, the workers and every
    # driver agree; removing the volume rotates it.
    umask 077
    if [ ! -s "$secret_file" ]; then
        python -c 'import secrets; print(secrets.token_hex(32))' > "$secret_file.tmp"
        mv "$secret_file.tmp" "$secret_file"
        echo "sodm-spark: created a Spark RPC secret in $secret_file"
    fi
    chmod 600 "$secret_file"
    exit 0
fi

# Spark reads SPARK_CONF_DIR: a private copy of the image's conf plus the secret. The daemons
# and spark-submit (also under `docker compose exec`, and for notebooks) read it from there,
# not from a command line that ps would show.
umask 077
mkdir -p "$SPARK_CONF_DIR"
cp -R "$image_conf/." "$SPARK_CONF_DIR/"
if [ -s "$secret_file" ]; then
    printf 'spark.authenticate.secret %s\n' "$(cat "$secret_file")" \
        >> "$SPARK_CONF_DIR/spark-defaults.conf"
else
    echo "sodm-spark: no $secret_file; Spark with spark.authenticate will not start" >&2
fi
chmod 600 "$SPARK_CONF_DIR/spark-defaults.conf"

if [ "${1:-}" = jupyter ]; then
    if [ -z "${JUPYTER_TOKEN:-}" ]; then
        JUPYTER_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe(24))')
        echo "sodm-spark: Jupyter Lab at http://127.0.0.1:8888/lab?token=$JUPYTER_TOKEN"
    else
        echo "sodm-spark: Jupyter Lab at http://127.0.0.1:8888/lab (token: your JUPYTER_TOKEN)"
    fi
    export JUPYTER_TOKEN
fi

exec "$@"
