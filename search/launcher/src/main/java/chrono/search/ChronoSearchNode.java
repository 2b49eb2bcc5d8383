package chrono.search;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.logging.log4j.LogManager;
import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.painless.PainlessPlugin;
import org.opensearch.plugins.Plugin;
import org.opensearch.transport.Netty4Plugin;

/**
 * Chrono's search engine for tests and the demo: one OpenSearch node, alone in its cluster,
 * listening on loopback only.
 *
 * <p>The OpenSearch distribution is not in the package registries Chrono's machines reach, but
 * its jars are on Maven Central, so this main starts {@link Node} itself with the modules the
 * distribution would have loaded from its {@code modules/} directory: the Netty4 transport (HTTP
 * and node-to-node), analysis-common and lang-painless, here taken from the classpath.
 *
 * <pre>
 * java -Xms512m -Xmx512m -Djava.io.tmpdir=DATA/tmp -cp 'target/classes:target/lib/*' \
 *     chrono.search.ChronoSearchNode --data-dir DATA [--http-port 9200] [--transport-port 9300] \
 *     [--users-file FILE]
 * </pre>
 *
 * Every option can also come from the environment: {@code CHRONO_SEARCH_DATA_DIR},
 * {@code CHRONO_SEARCH_HTTP_PORT}, {@code CHRONO_SEARCH_TRANSPORT_PORT},
 * {@code CHRONO_SEARCH_USERS_FILE}. With a users file every HTTP request needs basic
 * authentication as one of its users and the transport port serves nobody ({@link
 * ChronoAuthPlugin}); without one the node is open to every local process, and logs a warning
 * saying so ({@code chrono services up} always gives one). The data directory holds
 * {@code data/}, {@code config/} and {@code logs/chrono-search.log}. SIGTERM closes the node
 * cleanly (a shutdown hook), so the next start does not have to recover its shards.
 */
public final class ChronoSearchNode {

    static final String CLUSTER_NAME = "chrono";
    static final String NODE_NAME = "chrono-search";
    static final String LOOPBACK = "127.0.0.1";
    static final int DEFAULT_HTTP_PORT = 9200;
    static final int DEFAULT_TRANSPORT_PORT = 9300;
    static final long CLOSE_TIMEOUT_S = 30;
    /** Read by log4j2.properties; must be set before the first logger exists. */
    static final String LOG_FILE_PROPERTY = "chrono.search.log_file";

    private ChronoSearchNode() {}

    /** The Node constructor that takes classpath plugins is protected: this subclass opens it. */
    static final class ClasspathPluginNode extends Node {
        ClasspathPluginNode(Environment environment, Collection<Class<? extends Plugin>> plugins) {
            // true: forbid private index settings, as a production node does.
            super(environment, plugins, true);
        }
    }

    /** What the command line and environment ask for. */
    record Options(Path dataDir, int httpPort, int transportPort, Path usersFile) {

        static Options parse(String[] args, Map<String, String> env) {
            Map<String, String> given = new HashMap<>();
            given.put("--data-dir", env.get("CHRONO_SEARCH_DATA_DIR"));
            given.put("--http-port", env.getOrDefault("CHRONO_SEARCH_HTTP_PORT", "" + DEFAULT_HTTP_PORT));
            given.put(
                "--transport-port",
                env.getOrDefault("CHRONO_SEARCH_TRANSPORT_PORT", "" + DEFAULT_TRANSPORT_PORT)
            );
            given.put("--users-file", env.get("CHRONO_SEARCH_USERS_FILE"));
            for (int i = 0; i < args.length; i++) {
                if (!given.containsKey(args[i]) || i + 1 == args.length) {
                    throw new IllegalArgumentException("unknown option or missing value: " + args[i] + "\n" + usage());
                }
                given.put(args[i], args[++i]);
            }
            if (given.get("--data-dir") == null || given.get("--data-dir").isBlank()) {
                throw new IllegalArgumentException("--data-dir (or CHRONO_SEARCH_DATA_DIR) is required\n" + usage());
            }
            return new Options(
                Path.of(given.get("--data-dir")).toAbsolutePath(),
                port(given, "--http-port"),
                port(given, "--transport-port"),
                blank(given.get("--users-file")) ? null : Path.of(given.get("--users-file")).toAbsolutePath()
            );
        }

        private static boolean blank(String value) {
            return value == null || value.isBlank();
        }

        private static int port(Map<String, String> given, String option) {
            try {
                int port = Integer.parseInt(given.get(option));
                if (port > 0 && port < 65536) {
                    return port;
                }
            } catch (NumberFormatException e) {
                // reported below
            }
            throw new IllegalArgumentException(option + " must be a TCP port, not " + given.get(option));
        }

        static String usage() {
            return "usage: ChronoSearchNode --data-dir DIR [--http-port 9200] [--transport-port 9300] "
                + "[--users-file FILE]";
        }

        Path logFile() {
            return dataDir.resolve("logs").resolve("chrono-search.log");
        }
    }

    static Settings settings(Options options) {
        Path home = options.dataDir();
        return Settings.builder()
            .put("cluster.name", CLUSTER_NAME)
            .put("node.name", NODE_NAME)
            .put("path.home", home.toString())
            .put("path.data", home.resolve("data").toString())
            .put("path.logs", home.resolve("logs").toString())
            .put("network.host", LOOPBACK)
            .put("http.port", options.httpPort())
            .put("transport.port", options.transportPort())
            .put("discovery.type", "single-node")
            // One node on a shared developer disk: a fuller disk must not turn indices read-only.
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            .put(
                ChronoAuthPlugin.USERS_FILE.getKey(),
                options.usersFile() == null ? "" : options.usersFile().toString()
            )
            .build();
    }

    public static void main(String[] args) {
        Options options;
        try {
            options = Options.parse(args, System.getenv());
        } catch (IllegalArgumentException e) {
            System.err.println(e.getMessage());
            System.exit(2);
            return;
        }
        try {
            for (String sub : List.of("data", "config", "logs")) {
                Files.createDirectories(options.dataDir().resolve(sub));
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        // Before any OpenSearch class asks log4j for a logger, or log4j2.properties has no file.
        System.setProperty(LOG_FILE_PROPERTY, options.logFile().toString());
        // Our shutdown hook logs while the node closes; log4j's own hook would stop logging first.
        System.setProperty("log4j.shutdownHookEnabled", "false");
        System.setProperty("log4j2.disable.jmx", "true");

        CountDownLatch closed = new CountDownLatch(1);
        try {
            Environment environment = InternalSettingsPreparer.prepareEnvironment(
                settings(options),
                Map.of(),
                options.dataDir().resolve("config"),
                () -> NODE_NAME
            );
            // Built here, not before: a node that cannot lock its data directory throws here.
            Node node = new ClasspathPluginNode(
                environment,
                List.of(
                    Netty4Plugin.class,
                    CommonAnalysisPlugin.class,
                    PainlessPlugin.class,
                    ChronoAuthPlugin.class
                )
            );
            if (options.usersFile() == null) {
                LogManager.getLogger(ChronoSearchNode.class)
                    .warn("no --users-file: the node answers every local process without credentials");
            }
            Runtime.getRuntime().addShutdownHook(new Thread(() -> close(node, closed), "chrono-search-shutdown"));
            node.start();
        } catch (Exception | LinkageError e) {
            // In the node's log, where `chrono services up` points, and on stderr (stdout.log).
            LogManager.getLogger(ChronoSearchNode.class).fatal("chrono-search could not start", e);
            System.err.println("chrono-search could not start; see " + options.logFile());
            e.printStackTrace();
            System.exit(1); // the shutdown hook, if registered yet, closes what did start
        }
        System.out.println("chrono-search started: http://" + LOOPBACK + ":" + options.httpPort() + "/");
        // The node's threads are daemons: this thread keeps the JVM alive until SIGTERM.
        try {
            closed.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void close(Node node, CountDownLatch closed) {
        try {
            node.close();
            if (!node.awaitClose(CLOSE_TIMEOUT_S, TimeUnit.SECONDS)) {
                System.err.println("chrono-search did not close within " + CLOSE_TIMEOUT_S + " s");
            }
        } catch (IOException | InterruptedException e) {
            System.err.println("chrono-search failed to close cleanly: " + e);
        } finally {
            LogManager.shutdown();
            closed.countDown();
        }
    }
}
