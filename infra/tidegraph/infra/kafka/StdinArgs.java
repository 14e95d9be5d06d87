// Runs a Java tool with extra arguments read from standard input, one per line, appended to
// those given on the command line: a secret passed this way (the SCRAM password given to the
// storage format tool) is never in the process's argv, so `ps` and /proc/<pid>/cmdline do not
// show it. Launched as a single source file (`java StdinArgs.java MAIN ARGS...`, JEP 330).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

public class StdinArgs {
    public static void main(String[] argv) throws Throwable {
        if (argv.length < 1) {
            System.err.println("usage: java StdinArgs.java MAIN-CLASS [ARGS...] < extra-args");
            System.exit(2);
        }
        List<String> args = new ArrayList<>(List.of(argv).subList(1, argv.length));
        BufferedReader in =
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            args.add(line);
        }
        try {
            Class.forName(argv[0])
                .getMethod("main", String[].class)
                .invoke(null, (Object) args.toArray(new String[0]));
        } catch (java.lang.reflect.InvocationTargetException e) {
            throw e.getCause();
        }
    }
}
