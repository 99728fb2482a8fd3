from servecal.cli import main

main()
